//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Write, pause, resume on use: the file is read back; stats report the
// state (idle before any call, paused, running once a call started the
// sandbox) and the workspace's disk use without following a guest's
// symlink out of it; closing a paused session removes everything.
func TestPauseResumeAndStats(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newTestSession(t, Options{StateDir: dir})
	if st, err := s.Stats(ctx); err != nil || st.State != session.StateIdle || st.Uptime != nil {
		t.Fatalf("stats before any call (nothing runs): %+v, %v", st, err)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, s, `printf 0123456789 >note.txt && ln -s / escape && ln -s "$1" big`, big)
	if err := s.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != session.StatePaused || st.Backend != "local" || st.DiskUsedBytes == nil {
		t.Fatalf("stats %+v", st)
	}
	// The box holds note.txt and whatever Create put there (small files),
	// never the host tree behind the symlinks.
	if used := *st.DiskUsedBytes; used < 10 || used > 1<<20 {
		t.Errorf("disk used %d, want note.txt's 10 bytes plus little", used)
	}
	if got := string(sh(t, s, `cat note.txt`).Stdout); got != "0123456789" {
		t.Fatalf("read back %q after pause", got)
	}
	if st, err := s.Stats(ctx); err != nil || st.State != session.StateRunning || st.Uptime == nil {
		t.Fatalf("stats after a call resumed the session (its sandbox runs): %+v, %v", st, err)
	}
	if err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, s.Name())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory after close: %v", err)
	}
	for _, err := range []error{s.Pause(ctx), s.Resume(ctx)} {
		if !errors.Is(err, session.ErrClosed) {
			t.Errorf("on a closed session: %v, want ErrClosed", err)
		}
	}
	if _, err := s.Stats(ctx); !errors.Is(err, session.ErrClosed) {
		t.Errorf("Stats on a closed session: %v", err)
	}
}

// A tree the guest nests 6000 deep in a moment costs stats a moment too
// (resolving each directory from the box again took minutes), well within
// the generous deadline given here; the file at the bottom is counted.
func TestStatsOfADeepTree(t *testing.T) {
	s := newTestSession(t, Options{StateDir: t.TempDir()})
	before := *stats(t, s, context.Background()).DiskUsedBytes
	sh(t, s, `p=$(printf 'd/%.0s' $(seq 1500)) && for i in 1 2 3 4; do mkdir -p "$p" && cd "$p"; done && printf 1234567 >deep`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if after := *stats(t, s, ctx).DiskUsedBytes; after-before != 7 {
		t.Fatalf("stats counted %d bytes, then %d with the deep file", before, after)
	}
}

func stats(t *testing.T, s *Session, ctx context.Context) *session.Stats {
	t.Helper()
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return st
}
