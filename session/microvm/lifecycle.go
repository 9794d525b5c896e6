package microvm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// Bounds of the lifecycle's msb calls. A graceful stop gets stopGraceSecs
// before msb kills the VM; a start boots it again.
const (
	stopGraceSecs  = 10
	pauseTimeout   = stopGraceSecs*time.Second + 20*time.Second
	resumeTimeout  = time.Minute
	inspectTimeout = 30 * time.Second
)

// runState is what this process knows of its sandbox.
type runState int

const (
	stateUnknown runState = iota // attached: not asked yet
	stateRunning
	statePaused
	// stateUnsure: a stop or a start failed or was cut short (its context
	// ended while msb ran), so msb may have done it or not: the next call
	// or Resume asks msb, and the next Pause stops again.
	stateUnsure
)

// lifecycle serialises pause and resume against calls: each Shell and
// CopyIn holds mu shared while it runs, Pause and Resume hold it
// exclusively, so a pause waits for the calls in flight instead of killing
// them.
type lifecycle struct {
	mu     sync.RWMutex
	state  runState // written under mu held exclusively
	manual atomic.Bool
}

// mustAsk says the state is msb's to tell: never asked, or a stop or start
// that may or may not have happened.
func (l *lifecycle) mustAsk() bool { return l.state == stateUnknown || l.state == stateUnsure }

var _ session.Lifecycle = (*Session)(nil)

// SetAutoResume says whether a call on a paused session resumes it first
// (the default) or fails with ErrPaused.
func (s *Session) SetAutoResume(on bool) { s.life.manual.Store(!on) }

// enter admits one call and returns its release. A paused session is
// resumed first: one msb start, which it keeps (the sandbox stays up for
// the calls that follow). An attached session does not know its state:
// with auto-resume it runs the call as is (msb itself starts a stopped
// sandbox for the call and stops it again afterwards); without, it asks
// msb once (inspect) so that a paused sandbox is not started behind the
// caller's back. After a stop or a start that failed, it asks msb too.
func (s *Session) enter(ctx context.Context) (func(), error) {
	for {
		s.life.mu.RLock()
		st := s.life.state
		if st == stateRunning || st == stateUnknown && !s.life.manual.Load() {
			return s.life.mu.RUnlock, nil
		}
		s.life.mu.RUnlock()
		if err := s.settle(ctx); err != nil {
			return nil, err
		}
	}
}

// settle leaves the state running, or fails: ErrPaused when the session is
// paused and must not be resumed on use.
func (s *Session) settle(ctx context.Context) error {
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	// Before refusing, msb is asked: another process may have resumed the
	// sandbox since this one saw it stopped.
	if s.life.mustAsk() || s.life.state == statePaused && s.life.manual.Load() {
		if err := s.learnState(ctx); err != nil {
			return err
		}
	}
	if s.life.state != statePaused {
		return nil
	}
	if s.life.manual.Load() {
		return fmt.Errorf("%w: sandbox %s is stopped and this session does not resume on use; resume it first (oma-sandbox session resume %s)",
			session.ErrPaused, s.names.Sandbox, s.names.Sandbox)
	}
	return s.start(ctx)
}

// learnState asks msb whether the sandbox runs; s.life.mu must be held.
func (s *Session) learnState(ctx context.Context) error {
	ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
	info, err := s.client.Inspect(ictx, s.names.Sandbox)
	cancel()
	if err != nil {
		_, mapped := shellResult(nil, err)
		return fmt.Errorf("state of %s: %w", s.names.Sandbox, mapped)
	}
	s.learned(info)
	s.life.state = stateRunning
	if msb.Stopped(info.Status) {
		s.life.state = statePaused
	}
	return nil
}

// start boots the stopped sandbox again; s.life.mu must be held.
func (s *Session) start(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, resumeTimeout)
	err := s.client.Start(sctx, s.names.Sandbox)
	cancel()
	if errors.Is(err, msb.ErrStillRunning) {
		err = nil // started meanwhile (another process, or msb's own exec)
	}
	if err != nil {
		s.life.state = stateUnsure
		_, mapped := shellResult(nil, err)
		return fmt.Errorf("resume %s: %w", s.names.Sandbox, mapped)
	}
	s.life.state = stateRunning
	s.resumed()
	s.logger.Debug("session resumed", "sandbox", s.names.Sandbox)
	return nil
}

// stop stops the sandbox gracefully (msb stop, killed after
// stopGraceSecs), after closing the agent's channel (the next call after a
// start reopens it); the error is mapped onto the Session errors.
// s.life.mu must be held.
func (s *Session) stop(ctx context.Context) error {
	s.closeChannel(false)
	pctx, cancel := context.WithTimeout(ctx, pauseTimeout)
	err := s.client.Stop(pctx, msb.StopOptions{Names: []string{s.names.Sandbox}, Timeout: stopGraceSecs})
	cancel()
	if err != nil {
		s.life.state = stateUnsure
		_, err = shellResult(nil, err)
	}
	return err
}

// Pause stops the sandbox (msb stop, graceful for stopGraceSecs, then
// killed): the VM and every process in it end, the workspace volume and
// the root disk are kept. It waits for calls in flight. The next call
// resumes the session unless auto-resume is off. Idempotent: msb stops a
// stopped sandbox without complaint, so a pause stops it whatever this
// process saw last (another may have resumed it since).
func (s *Session) Pause(ctx context.Context) error {
	if err := s.usable(); err != nil {
		return err
	}
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	if err := s.stop(ctx); err != nil {
		return fmt.Errorf("pause %s: %w", s.names.Sandbox, err)
	}
	s.life.state = statePaused
	s.logger.Debug("session paused", "sandbox", s.names.Sandbox)
	return nil
}

// Resume starts the stopped sandbox again: one msb start (after one msb
// inspect when this process does not know the state). A running session
// is left alone.
func (s *Session) Resume(ctx context.Context) error {
	if err := s.usable(); err != nil {
		return err
	}
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	if s.life.mustAsk() {
		if err := s.learnState(ctx); err != nil {
			return err
		}
	}
	if s.life.state == stateRunning {
		return nil
	}
	return s.start(ctx)
}

// Stats reads msb's metrics of the sandbox and the workspace volume's use:
// two msb calls. A stopped sandbox (paused, or stopped by its idle timeout)
// has no live metrics: its stats say paused and carry the disk use only.
func (s *Session) Stats(ctx context.Context) (*session.Stats, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	st := &session.Stats{Backend: "msb", State: session.StatePaused, Sampled: time.Now().UTC()}
	m, err := s.client.Metrics(ctx, s.names.Sandbox)
	switch {
	case errors.Is(err, msb.ErrNoMetrics):
	case err != nil:
		_, mapped := shellResult(nil, err)
		return nil, fmt.Errorf("stats of %s: %w", s.names.Sandbox, mapped)
	case m.State == "exited":
		// The last run's totals; nothing runs now.
	default:
		st.State, st.Sampled = session.StateRunning, m.Timestamp
		if m.CPUs > 0 {
			st.CPUs = ptr(m.CPUs)
		}
		st.CPUPercent = ptr(m.CPUPercent)
		st.MemoryBytes, st.MemoryLimitBytes = ptr(m.MemoryBytes), ptr(m.MemoryLimitBytes)
		st.RootDiskBytes = ptr(m.UpperUsedBytes)
		st.DiskReadBytes, st.DiskWriteBytes = ptr(m.DiskReadBytes), ptr(m.DiskWriteBytes)
		st.NetRxBytes, st.NetTxBytes = ptr(m.NetRxBytes), ptr(m.NetTxBytes)
		st.Uptime = ptr(m.Uptime)
	}
	vols, err := s.client.VolumeList(ctx)
	if err != nil {
		_, mapped := shellResult(nil, err)
		return nil, fmt.Errorf("stats of %s: workspace volume: %w", s.names.Sandbox, mapped)
	}
	for _, v := range vols {
		if v.Name == s.names.Volume {
			st.DiskUsedBytes = ptr(v.UsedBytes)
		}
	}
	return st, nil
}

func ptr[T any](v T) *T { return &v }

var _ session.Resizer = (*Session)(nil)

// Resize changes the sandbox's CPUs or memory (msb modify). A paused
// sandbox takes the change at its next start. A running one takes it live
// when it fits what the VM booted with; more needs r.Restart (msb restarts
// the VM: its processes end, the workspace stays) or r.NextStart (saved
// for the next resume), and otherwise fails with msb's reason and nothing
// changes.
func (s *Session) Resize(ctx context.Context, r session.Resize) error {
	if err := s.usable(); err != nil {
		return err
	}
	o := msb.ModifyOptions{Name: s.names.Sandbox, CPUs: r.CPUs, Memory: r.Memory, NextStart: r.NextStart, Restart: r.Restart}
	if _, err := o.Args(); err != nil {
		return fmt.Errorf("%w: resize %s: %w", session.ErrInvalid, s.names.Sandbox, err)
	}
	// Exclusive: a restart must not cut a call short.
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	mctx, cancel := context.WithTimeout(ctx, resumeTimeout)
	err := s.client.Modify(mctx, o)
	cancel()
	if err != nil {
		if errors.Is(err, msb.ErrRestartRequired) {
			return fmt.Errorf("resize %s: %w (pass Restart to restart it now, or NextStart to apply it at the next resume)", s.names.Sandbox, err)
		}
		_, mapped := shellResult(nil, err)
		return fmt.Errorf("resize %s: %w", s.names.Sandbox, mapped)
	}
	s.logger.Debug("session resized", "sandbox", s.names.Sandbox, "cpus", r.CPUs, "memory", r.Memory)
	return nil
}
