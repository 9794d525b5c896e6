package omasandbox

import (
	"context"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// Stats is what a session uses; see session.Stats.
type Stats = session.Stats

// Resize is a change of a session's CPUs or memory; see session.Resize.
type Resize = session.Resize

// PortForward is a host port forwarded into an msb session (Options.Ports).
type PortForward = msb.PortForward

// ErrPaused reports a call on a paused session opened with NoAutoResume.
var ErrPaused = session.ErrPaused

// lifecycle is the backend's session.Lifecycle; both backends have one.
func (s *Session) lifecycle() session.Lifecycle { return s.sess.(session.Lifecycle) }

// Pause frees what the session holds while it waits, keeping its
// workspace. On msb the sandbox is stopped (msb stop): its VM and every
// process in it end. On the local backend the session's sandbox is
// frozen (the cgroup freezer): its processes stop where they are, keeping
// their memory, until the session resumes (or, on a host without a
// freezer, the sandbox ends). Either way the next tool call resumes the
// session first unless it was opened with NoAutoResume. It waits for this
// process's calls in flight.
func (s *Session) Pause(ctx context.Context) error {
	ctx, a := s.beginAction(ctx, "pause")
	err := s.lifecycle().Pause(ctx)
	s.endAction(ctx, a, err)
	return err
}

// Resume makes a paused session ready again (msb start; local: its
// sandbox thawed); a running one is left as it is.
func (s *Session) Resume(ctx context.Context) error {
	ctx, a := s.beginAction(ctx, "resume")
	err := s.lifecycle().Resume(ctx)
	s.endAction(ctx, a, err)
	return err
}

// Stats reports the session's use: on msb its VM's metrics (CPU, memory,
// disk and network counters; none while paused) and its workspace volume's
// size; on the local backend the workspace's disk use and, while its
// sandbox runs, its uptime and memory use under a memory limit.
func (s *Session) Stats(ctx context.Context) (*Stats, error) { return s.lifecycle().Stats(ctx) }

// Resize changes the session's CPUs or memory. On msb (msb modify) a
// paused session takes the change at its next start and a running one
// live when it fits what its VM booted with; beyond that it needs
// r.Restart (the VM restarts: its processes end, the workspace stays) or
// r.NextStart, and otherwise fails (msb.ErrRestartRequired) with nothing
// changed. On the local backend the new limits bind every later call:
// the session's sandbox ends and the next call starts one under them;
// CPUs as a CPU quota, Memory as the memory limit; Restart and NextStart
// change nothing there.
func (s *Session) Resize(ctx context.Context, r Resize) error {
	return s.sess.(session.Resizer).Resize(ctx, r)
}
