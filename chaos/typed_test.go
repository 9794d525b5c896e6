//go:build unix

package chaos

import (
	"context"
	"errors"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// typedSentinels are the errors a caller can test with errors.Is.
var typedSentinels = []error{
	session.ErrClosed, session.ErrPoisoned, session.ErrGuestTimeout, session.ErrHostTimeout,
	session.ErrAborted, session.ErrOutputOverflow, session.ErrCannotStart, session.ErrChannelBroken,
	session.ErrNotFound, session.ErrInvalid,
	tools.ErrUnknownTool, tools.ErrInvalidInput, tools.ErrPathEscape,
	msb.ErrInvalid, msb.ErrSandboxNotFound, msb.ErrVolumeNotFound, msb.ErrAlreadyExists, msb.ErrVolumeAttached,
	msb.ErrExecTimedOut, msb.ErrCannotStart, msb.ErrOutputOverflow, msb.ErrHostTimeout, msb.ErrAborted,
	msb.ErrMalformedOutput,
	glob.ErrNotReady, glob.ErrLimit, glob.ErrMalformed, glob.ErrInvalidPattern,
	bashproto.ErrNoDispatch, bashproto.ErrNoCompletion, bashproto.ErrExitMismatch,
	context.Canceled, context.DeadlineExceeded,
}

const untyped = "UNTYPED"

// classify names how an operation ended: "ok"; the first of typedSentinels
// the error matches; else the typed error it carries, found with errors.As
// (*tools.CommandError: a bash command's non-zero exit or timeout;
// *tools.GuestError: a tool's guest-side failure; *msb.ExitError: msb's
// non-zero exit with a message no sentinel covers); else untyped.
func classify(err error) string {
	if err == nil {
		return "ok"
	}
	for _, s := range typedSentinels {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	var cmdErr *tools.CommandError
	var guestErr *tools.GuestError
	var exitErr *msb.ExitError
	switch {
	case errors.As(err, &cmdErr):
		return "*tools.CommandError"
	case errors.As(err, &guestErr):
		return "*tools.GuestError"
	case errors.As(err, &exitErr):
		return "*msb.ExitError"
	}
	return untyped
}
