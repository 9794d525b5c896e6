package agentchan

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// sessionErrors maps what Run returns to the session seam's errors, in
// the order they are tested: a host deadline outranks the broken channel
// it caused.
var sessionErrors = []struct{ from, to error }{
	{context.DeadlineExceeded, session.ErrHostTimeout},
	{context.Canceled, session.ErrAborted},
	{ErrBroken, session.ErrChannelBroken},
	{ErrTimedOut, session.ErrGuestTimeout},
	{ErrOutputOverflow, session.ErrOutputOverflow},
	{ErrCannotStart, session.ErrCannotStart},
}

// SessionError wraps an error of Run with the session error it means
// (session.ErrHostTimeout, ErrGuestTimeout, ...), so every backend that
// runs calls on a channel reports them alike; nil stays nil.
func SessionError(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range sessionErrors {
		if errors.Is(err, m.from) {
			return &sessionError{kind: m.to, err: err}
		}
	}
	return err
}

// sessionError is an error of Run that also matches the session error it
// means (kind), whose words its text says once.
type sessionError struct{ kind, err error }

func (e *sessionError) Error() string {
	if msg := e.err.Error(); strings.HasPrefix(msg, e.kind.Error()) {
		return msg // "guest agent channel broken: ...", not that twice
	}
	return fmt.Sprintf("%v: guest agent: %v", e.kind, e.err)
}

func (e *sessionError) Unwrap() []error { return []error{e.kind, e.err} }
