//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Write, pause, resume on use: the file is read back; stats report the
// workspace's disk use without following a guest's symlink out of it;
// closing a paused session removes everything.
func TestPauseResumeAndStats(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newTestSession(t, Options{StateDir: dir})
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, s, `printf 0123456789 >note.txt && ln -s / escape && ln -s "$1" big`, big)
	if err := s.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	noProcs(t, s.Name())
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != session.StateIdle || st.Backend != "local" || st.DiskUsedBytes == nil {
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
