package tools

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// timedSession is a session with an operation timeout of its own.
type timedSession struct {
	session.Session
	timeout time.Duration
}

func (s timedSession) OperationTimeout() time.Duration { return s.timeout }

// A toolbox without an operation timeout of its own takes the session's,
// and one that names it keeps it.
func TestNewTakesTheSessionsOperationTimeout(t *testing.T) {
	s := timedSession{timeout: 42 * time.Second}
	assert.Equal(t, 42*time.Second, New(s, Options{}).opTimeout)
	assert.Equal(t, time.Second, New(s, Options{OperationTimeout: time.Second}).opTimeout)
	assert.Equal(t, session.DefaultOperationTimeout, New(timedSession{}, Options{}).opTimeout)
	assert.Equal(t, session.DefaultOperationTimeout, New(nil, Options{}).opTimeout)
}
