package tools

import (
	"context"
	"errors"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// shell runs one guest command bounded by the operation timeout.
func (t *Toolbox) shell(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	if opts.GuestTimeout == 0 {
		opts.GuestTimeout = t.opTimeout
	}
	res, err := t.sess.Shell(ctx, cmd, opts)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// guestError turns a failed guest builtin into the agent-facing error: the
// builtin's own message on stderr when it printed one.
func guestError(tool, p string, res *session.Result) error {
	msg := strings.TrimSpace(string(clip(res.Stderr)))
	if msg == "" {
		msg = tool + " failed on " + p
	}
	return &GuestError{Tool: tool, ExitCode: res.ExitCode, Msg: msg}
}

// GuestError is a tool failure reported by the guest command itself (a
// missing file, a permission problem); the session stays healthy.
type GuestError struct {
	Tool     string
	ExitCode int
	Msg      string
}

func (e *GuestError) Error() string { return e.Msg }

// clip bounds guest text quoted in errors.
func clip(b []byte) []byte {
	const max = 4096
	if len(b) > max {
		return append(b[:max:max], "…"...)
	}
	return b
}

// IsGuestError reports whether err is a guest-side tool failure.
func IsGuestError(err error) bool {
	var g *GuestError
	return errors.As(err, &g)
}
