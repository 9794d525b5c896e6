package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

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

// Pause has nothing to do: every call is its own sandbox whose processes
// end with it, so between calls nothing of the session runs and it holds
// only its directory, which pause keeps. It does not wait for calls in
// flight (they end on their own deadlines).
func (s *Session) Pause(ctx context.Context) error { return s.ready() }

// Resume has nothing to do either: the next call starts its own sandbox.
func (s *Session) Resume(ctx context.Context) error { return s.ready() }

// Stats reports the disk use of the session's workspace, uploads and
// outputs (regular files, symlinks not followed). Memory, CPU and process
// counters live in each call's cgroup, which ends with the call, so between
// calls there is nothing to report.
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
	used, err := diskUse(ctx, s.dirs.Box)
	if err != nil {
		return nil, fmt.Errorf("local sandbox %s: stats: %w", s.rec.Name, err)
	}
	return &session.Stats{Backend: "local", State: state, Sampled: time.Now().UTC(), DiskUsedBytes: &used}, nil
}

// diskUse sums the sizes of the regular files under dir. It reads through
// an os.Root, so a guest's symlink is never followed out of dir, and
// entries that vanish while it walks (a call still writing) are skipped.
func diskUse(ctx context.Context, dir string) (int64, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	var total int64
	err = fs.WalkDir(root.FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		total += info.Size()
		return nil
	})
	return total, err
}
