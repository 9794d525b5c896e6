//go:build !unix

package transfer

import (
	"errors"
	"io"

	"github.com/oma-sandbox/oma-sandbox/outputs"
)

// stage needs directory descriptors opened without following links, which
// this package only has on unix hosts.
type stage struct{}

func openStage(string) (*stage, error) {
	return nil, errors.New("collecting outputs needs a unix host")
}

func (*stage) sink(outputs.Record) (io.Writer, func(bool) error, error) {
	return nil, nil, errors.ErrUnsupported
}

func (*stage) install([]File, bool) ([]File, []outputs.Refusal, error) {
	return nil, nil, errors.ErrUnsupported
}

func (*stage) close() {}
