package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// pausedFile, in a session's directory, marks it paused for every process;
// resumedFile's time is the session's last resume, from which, as from a
// pause, the reaper ages it.
const (
	pausedFile  = "paused"
	resumedFile = "resumed"
)

// awakeWeight is the size of a session's awake semaphore: a call takes one,
// Pause all of it.
const awakeWeight = 1 << 30

// Pause freezes the session's resident sandbox, whichever process started
// it (the cgroup freezer): every process in it, background ones included,
// stops where it is and keeps its memory until Resume thaws it. It waits
// for this process's calls in flight; another process's call is frozen
// where it is. A sandbox that cannot be frozen (no freezer on the host,
// or one that does not freeze within the operation timeout) ends instead,
// as msb's stop ends a VM. The session is paused for every process until
// Resume, or the next call, resumes it (SetAutoResume). Idempotent.
func (s *Session) Pause(ctx context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	if err := s.awake.Acquire(ctx, awakeWeight); err != nil {
		return fmt.Errorf("local sandbox %s: pause: waiting for calls in flight: %w", s.rec.Name, ctxError(ctx))
	}
	defer s.awake.Release(awakeWeight)
	if err := s.markPaused(true); err != nil {
		return fmt.Errorf("local sandbox %s: pause: %w", s.rec.Name, err)
	}
	frozen, err := freezeResident(ctx, s.dirs.Root, true, s.opTimeout(), nil)
	if err != nil && ctx.Err() != nil {
		// Cancelled, not refused: nothing is paused, nothing ends.
		_ = s.markPaused(false)
		return fmt.Errorf("local sandbox %s: pause: %w", s.rec.Name, ctxError(ctx))
	}
	if err != nil {
		s.log.Warn("local sandbox: the resident sandbox did not freeze; ending it", "err", err)
	}
	if !frozen {
		s.stopResident("a pause of the session (the sandbox could not be frozen)")
	}
	return nil
}

// Resume thaws the session's resident sandbox, if one is frozen, and marks
// the session running again, for every process. Idempotent.
func (s *Session) Resume(ctx context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	return s.resume(ctx)
}

func (s *Session) resume(ctx context.Context) error {
	if _, err := freezeResident(ctx, s.dirs.Root, false, s.opTimeout(), nil); err != nil {
		return fmt.Errorf("local sandbox %s: resume: %w", s.rec.Name, err)
	}
	if err := s.markPaused(false); err != nil {
		return fmt.Errorf("local sandbox %s: resume: %w", s.rec.Name, err)
	}
	return nil
}

// SetAutoResume says whether a call on a paused session resumes it first
// (the default) or fails with session.ErrPaused, running nothing.
func (s *Session) SetAutoResume(on bool) { s.manual.Store(!on) }

// paused reports whether the session is paused, by any process.
func (s *Session) paused() bool { return marked(s.dirs.Root, pausedFile) }

func (s *Session) markPaused(paused bool) error {
	// The session's directory is the host's alone: no guest put a link here.
	if !paused {
		if err := os.Remove(filepath.Join(s.dirs.Root, pausedFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return os.WriteFile(filepath.Join(s.dirs.Root, resumedFile), nil, 0o600)
	}
	return os.WriteFile(filepath.Join(s.dirs.Root, pausedFile), nil, 0o600)
}

// wake admits a call: on a paused session it resumes it first, or fails
// with session.ErrPaused when auto-resume is off. The call runs until
// release, and a Pause of this process waits for it.
func (s *Session) wake(ctx context.Context) (release func(), err error) {
	for {
		if err := s.awake.Acquire(ctx, 1); err != nil {
			return nil, ctxError(ctx)
		}
		if !s.paused() {
			return func() { s.awake.Release(1) }, nil
		}
		s.awake.Release(1)
		if s.manual.Load() {
			return nil, fmt.Errorf("local sandbox %s: %w: this session does not resume on use; resume it first (oma-sandbox session resume %s)", s.rec.Name, session.ErrPaused, s.rec.Name)
		}
		if err := s.resume(ctx); err != nil {
			return nil, err
		}
	}
}

// Stats reports the session's state (paused; running while its resident
// sandbox runs, whichever process started it, or this process has calls
// in flight; else idle), the disk use of its workspace, uploads
// and outputs (regular files, symlinks not followed), and, while its resident
// sandbox runs, how long it has and, under a memory limit, the memory all
// in it uses (its group's) and the limit. A sandbox of one call has no
// numbers between calls.
func (s *Session) Stats(ctx context.Context) (*session.Stats, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	res, resident := runningResident(s.dirs.Root)
	s.mu.Lock()
	state := session.StateIdle
	if resident || len(s.calls) > 0 {
		state = session.StateRunning
	}
	s.mu.Unlock()
	if s.paused() {
		state = session.StatePaused
	}
	// The guest shapes the tree: however deep or wide, the walk ends at
	// the operation timeout.
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout())
	defer cancel()
	used, err := safefs.SizeOf(ctx, s.dirs.Box)
	if err != nil {
		return nil, fmt.Errorf("local sandbox %s: stats: %w", s.rec.Name, err)
	}
	st := &session.Stats{Backend: "local", State: state, Sampled: time.Now().UTC(), DiskUsedBytes: &used}
	if resident {
		residentStats(s.dirs.Root, res, s.limits(), st)
	}
	return st, nil
}

var _ session.Resizer = (*Session)(nil)

// limits are the session's current limits: its record's, read again
// whenever the record was replaced since, as Resize in any process
// replaces it, so that no process runs a call under limits it attached
// with once they have changed. An unreadable record leaves them as they
// were.
func (s *Session) limits() Limits {
	path := filepath.Join(s.dirs.Root, recordFile)
	fi, err := os.Stat(path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || s.recRead != nil && os.SameFile(fi, s.recRead) && fi.ModTime().Equal(s.recRead.ModTime()) && fi.Size() == s.recRead.Size() {
		return s.rec.Limits
	}
	if rec, err := readRecord(s.dirs.Root); err == nil && rec.Name == s.rec.Name {
		s.rec.Limits, s.recRead = rec.Limits, fi
	}
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
	if r.CPUs == 0 && r.Memory == "" {
		return fmt.Errorf("local sandbox %s: resize needs CPUs or memory: %w", s.rec.Name, session.ErrInvalid)
	}
	// Each resize, of this process or another, changes the limits the one
	// before wrote, rather than write over its change.
	unlock, err := lockResize(ctx, s.dirs.Root)
	if err != nil {
		return fmt.Errorf("local sandbox %s: resize: %w", s.rec.Name, err)
	}
	defer unlock()
	l, err := s.limits().Sized(r.CPUs, r.Memory)
	if err == nil {
		err = l.validate()
	}
	if err != nil {
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
	s.stopResident("a resize of the session")
	return nil
}

// maxSizeCPUs bounds a session's CPUs as msb bounds a VM's.
const maxSizeCPUs = 255

// Sized returns l with a VM's size applied, as Resize applies it: cpus (1
// to 255) as a CPU quota of that many CPUs, memory (msb's grammar: 512M,
// 2G) as the memory limit. A zero cpus or empty memory leaves that limit
// as it is.
func (l Limits) Sized(cpus int, memory string) (Limits, error) {
	if cpus != 0 {
		if cpus < 0 || cpus > maxSizeCPUs {
			return l, fmt.Errorf("cpus %d: want 1 to %d", cpus, maxSizeCPUs)
		}
		l.CPUQuota, l.CPUPeriod = time.Duration(cpus)*defaultCPUPeriod, defaultCPUPeriod
	}
	if memory != "" {
		mib, err := msb.ParseSize(memory)
		if err != nil {
			return l, fmt.Errorf("memory: %w", err)
		}
		l.MemoryBytes = int64(mib * (1 << 20))
	}
	return l, nil
}
