package agentchan

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// SessionError matches both the channel's error and the session error it
// means, and says each's words once.
func TestSessionError(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind error
		text string
	}{
		{fmt.Errorf("%w: %w", ErrBroken, errors.New("the agent's output ended")), session.ErrChannelBroken,
			"guest agent channel broken: the agent's output ended"},
		{fmt.Errorf("%w after 10s", ErrTimedOut), session.ErrGuestTimeout,
			"guest command timed out: guest agent: guest timeout after 10s"},
		{fmt.Errorf("run: %w", context.DeadlineExceeded), session.ErrHostTimeout,
			"host deadline exceeded: guest agent: run: context deadline exceeded"},
	} {
		got := SessionError(c.err)
		assert.EqualError(t, got, c.text)
		assert.ErrorIs(t, got, c.kind)
		assert.ErrorIs(t, got, c.err)
	}
	assert.NoError(t, SessionError(nil))
	other := errors.New("something else")
	assert.Equal(t, other, SessionError(other))
}
