package agentchan

import (
	"context"
	"errors"
	"fmt"

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
			return fmt.Errorf("%w: guest agent: %w", m.to, err)
		}
	}
	return err
}
