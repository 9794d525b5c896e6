package omasandbox

import (
	"context"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Stats is what a session uses; see session.Stats.
type Stats = session.Stats

// ErrPaused reports a call on a paused session opened with NoAutoResume.
var ErrPaused = session.ErrPaused

// lifecycle is the backend's session.Lifecycle; both backends have one.
func (s *Session) lifecycle() session.Lifecycle { return s.sess.(session.Lifecycle) }

// Pause frees what the session holds while it waits, keeping its
// workspace. On msb the sandbox is stopped (msb stop): its VM and every
// process in it end; the next tool call starts it again (msb start) unless
// the session was opened with NoAutoResume. On the local backend nothing
// runs between calls, so there is nothing to free: Pause only checks that
// the session is open. It waits for calls in flight (msb).
func (s *Session) Pause(ctx context.Context) error { return s.lifecycle().Pause(ctx) }

// Resume makes a paused session ready again (msb start); a running one,
// and every local one, is left as it is.
func (s *Session) Resume(ctx context.Context) error { return s.lifecycle().Resume(ctx) }

// Stats reports the session's use: on msb its VM's metrics (CPU, memory,
// disk and network counters; none while paused) and its workspace volume's
// size; on the local backend the workspace's disk use.
func (s *Session) Stats(ctx context.Context) (*Stats, error) { return s.lifecycle().Stats(ctx) }
