//go:build !linux && !darwin

package safefs

import (
	"context"
	"errors"
	"runtime"
)

// CopyTree is available on Linux and macOS only, where msb runs; no
// backend copies a guest's tree elsewhere.
func CopyTree(ctx context.Context, src, dst string, maxBytes int64) ([]string, error) {
	return nil, errors.New("copying a sandbox's tree is not supported on " + runtime.GOOS)
}
