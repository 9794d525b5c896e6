package local

import (
	"context"
	"fmt"
	"time"

	"github.com/oma-sandbox/oma-sandbox/internal/safefs"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

var _ session.Lifecycle = (*Session)(nil)

// ready refuses a closed or poisoned session, as a call would be refused.
func (s *Session) ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.poisoned:
		return fmt.Errorf("local sandbox %s: %w", s.rec.Name, session.ErrPoisoned)
	case s.closed:
		return fmt.Errorf("local sandbox %s: %w", s.rec.Name, session.ErrClosed)
	}
	return nil
}

// Pause ends the session's resident sandbox and everything running in it,
// as msb's stop ends a VM; the session then holds only its directory,
// which pause keeps. Calls that run sandboxes of their own are not waited
// for (they end on their own deadlines).
func (s *Session) Pause(ctx context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	s.stopResident()
	return nil
}

// Resume has nothing to do: the next call starts the sandbox it needs.
func (s *Session) Resume(ctx context.Context) error { return s.ready() }

// Stats reports the disk use of the session's workspace, uploads and
// outputs (regular files, symlinks not followed), and, while its resident
// sandbox runs, how long it has and, under a memory limit, the memory all
// in it uses (its group's) and the limit. A sandbox of one call has no
// numbers between calls.
func (s *Session) Stats(ctx context.Context) (*session.Stats, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	state := session.StateIdle
	if len(s.calls) > 0 {
		state = session.StateRunning
	}
	s.mu.Unlock()
	// The guest shapes the tree: however deep or wide, the walk ends at
	// the operation timeout.
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout())
	defer cancel()
	used, err := safefs.SizeOf(ctx, s.dirs.Box)
	if err != nil {
		return nil, fmt.Errorf("local sandbox %s: stats: %w", s.rec.Name, err)
	}
	st := &session.Stats{Backend: "local", State: state, Sampled: time.Now().UTC(), DiskUsedBytes: &used}
	residentStats(s.dirs.Root, s.limits(), st)
	return st, nil
}

var _ session.Resizer = (*Session)(nil)

// limits are the session's current limits; Resize changes them.
func (s *Session) limits() Limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.Limits
}

// Resize sets the limits every later call runs under (the next call
// starts a resident sandbox under them; a call in a sandbox of its own
// in flight keeps its cgroup's): CPUs as a CPU quota of that
// many CPUs, Memory (msb's grammar: 512M, 2G) as the memory limit. The
// record is rewritten, so a session attached later sees them too. A host
// that cannot enforce them refuses the resize, which then changes nothing.
// The session's resident sandbox ends; Restart and NextStart mean nothing
// more here.
func (s *Session) Resize(ctx context.Context, r session.Resize) error {
	if err := s.ready(); err != nil {
		return err
	}
	s.resizeMu.Lock()
	defer s.resizeMu.Unlock()
	l := s.limits()
	if r.CPUs == 0 && r.Memory == "" {
		return fmt.Errorf("local sandbox %s: resize needs CPUs or memory: %w", s.rec.Name, session.ErrInvalid)
	}
	if r.CPUs != 0 {
		if r.CPUs < 0 || r.CPUs > maxResizeCPUs {
			return fmt.Errorf("local sandbox %s: resize: cpus %d: want 1 to %d: %w", s.rec.Name, r.CPUs, maxResizeCPUs, session.ErrInvalid)
		}
		l.CPUQuota, l.CPUPeriod = time.Duration(r.CPUs)*defaultCPUPeriod, defaultCPUPeriod
	}
	if r.Memory != "" {
		mib, err := msb.ParseSize(r.Memory)
		if err != nil {
			return fmt.Errorf("local sandbox %s: resize: memory: %w: %w", s.rec.Name, err, session.ErrInvalid)
		}
		l.MemoryBytes = int64(mib * (1 << 20))
	}
	if err := l.validate(); err != nil {
		return fmt.Errorf("local sandbox %s: resize: %w: %w", s.rec.Name, err, session.ErrInvalid)
	}
	// The limits this session opened with may not have needed the
	// controls these need: probe for them.
	caps, _ := probeHost(ctx, probeRequest{bwrap: s.rec.Bwrap, limits: l})
	if err := admit(ctx, caps, s.rec.Policy, l); err != nil {
		return fmt.Errorf("local sandbox %s: resize: %w", s.rec.Name, err)
	}
	s.mu.Lock()
	rec := s.rec
	s.mu.Unlock()
	rec.Limits = l
	if err := createRecord(s.dirs.Root, rec); err != nil {
		return fmt.Errorf("local sandbox %s: resize: %w", s.rec.Name, err)
	}
	s.mu.Lock()
	s.rec.Limits = l
	s.mu.Unlock()
	// The resident sandbox runs under the limits it started with: it ends,
	// with what runs in it, and the next call starts one under these.
	s.stopResident()
	return nil
}

// maxResizeCPUs bounds Resize's CPUs as msb bounds a VM's.
const maxResizeCPUs = 255
