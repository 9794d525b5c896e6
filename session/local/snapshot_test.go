//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/session"
)

func TestSnapshotRestore(t *testing.T) {
	s := newTestSession(t, Options{})
	ctx := context.Background()
	sh(t, s, `printf one > a.txt; mkdir -p d; printf two > d/b.txt`)
	snaps, err := s.Snapshot(ctx, "a.txt", "/workspace/d/b.txt")
	if err != nil {
		t.Fatal(err)
	}
	if snaps[0].Path != "/workspace/a.txt" || snaps[0].Size != 3 ||
		snaps[0].Digest != "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed" {
		t.Fatalf("snapshot %+v", snaps[0])
	}
	sh(t, s, `printf changed > a.txt; rm d/b.txt`)
	if err := s.Restore(ctx, snaps...); err != nil {
		t.Fatal(err)
	}
	res := sh(t, s, `cat a.txt d/b.txt; stat -c %u d/b.txt`)
	if got := string(res.Stdout); got != "onetwo65534\n" {
		t.Fatalf("restored %q", got)
	}

	// Content of another session is not this one's to restore.
	other := newTestSession(t, Options{})
	if err := other.Restore(ctx, snaps[0]); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("foreign restore: %v", err)
	}
}

func TestSnapshotRefusals(t *testing.T) {
	s := newTestSession(t, Options{})
	ctx := context.Background()
	sh(t, s, `printf one > a.txt; mkdir d; ln -s /etc/passwd out; ln -s a.txt in; ln -s d dl; mkfifo fifo`)
	for _, p := range []string{"out", "in", "dl/x", "../x", "/workspace/../etc/passwd", "/etc/passwd", "/workspace-escape/a", "/workspace"} {
		if _, err := s.Snapshot(ctx, p); !errors.Is(err, ErrPathEscape) {
			t.Errorf("snapshot %q: %v", p, err)
		}
	}
	for _, p := range []string{"fifo", "d", "missing"} {
		if _, err := s.Snapshot(ctx, p); err == nil {
			t.Errorf("snapshot %q accepted", p)
		}
	}
	snaps, err := s.Snapshot(ctx, "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	// The agent swaps the file for a symlink leading out: restore refuses.
	target := filepath.Join(t.TempDir(), "host")
	if err := os.WriteFile(target, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(s.dirs.Workspace, "a.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(s.dirs.Workspace, "a.txt")); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(ctx, snaps...); !errors.Is(err, ErrPathEscape) {
		t.Fatalf("restore through a symlink: %v", err)
	}
	if data, _ := os.ReadFile(target); string(data) != "host" {
		t.Fatalf("host file changed: %q", data)
	}
	forged := snaps[0]
	forged.Path = "/workspace/../../etc/x"
	if err := s.Restore(ctx, forged); !errors.Is(err, ErrPathEscape) {
		t.Fatalf("restore outside: %v", err)
	}
}

// TestRestoreNeverHangsOnAGuestFIFO: the guest keeps exchanging a
// restored file with a FIFO while Restore runs. Restore checked the path
// and then opened it to write, without O_NONBLOCK: an open for writing of
// a FIFO no one reads blocks forever, and with it the host's call. Each
// Restore must end, writing the file or refusing.
func TestRestoreNeverHangsOnAGuestFIFO(t *testing.T) {
	s := newTestSession(t, Options{})
	ctx := context.Background()
	sh(t, s, `printf one > a.txt`)
	snaps, err := s.Snapshot(ctx, "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	neverBlocksOnFIFO(t, filepath.Join(s.dirs.Workspace, "a.txt"), "Restore", func() error {
		return s.Restore(ctx, snaps...)
	})
}

// neverBlocksOnFIFO calls write for 5 s while a racer, as the guest,
// keeps exchanging path with a FIFO (renameat2 RENAME_EXCHANGE), and
// fails if a call blocks.
func neverBlocksOnFIFO(t *testing.T, path, what string, write func() error) {
	t.Helper()
	fifo := filepath.Join(filepath.Dir(path), "fifo")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	raced := make(chan struct{})
	go func() {
		defer close(raced)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, fifo, unix.RENAME_EXCHANGE)
		}
	}()
	// The FIFO is always at one of the two names: a reader there lets a
	// blocked open for writing return.
	halt := sync.OnceFunc(func() {
		close(stop)
		<-raced
		for _, p := range []string{path, fifo} {
			if fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
		}
	})
	defer halt()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		done := make(chan error, 1)
		go func() { done <- write() }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			halt()
			<-done
			t.Fatalf("%s %d blocked on a FIFO the guest put in the file's place", what, i)
		}
	}
}

// TestRestoreRefusingOneChangesNothing: a Restore one of whose snapshots
// is refused (content this session does not hold, a path out of the
// workspace) writes none of the others.
func TestRestoreRefusingOneChangesNothing(t *testing.T) {
	s := newTestSession(t, Options{})
	ctx := context.Background()
	sh(t, s, `printf one > a.txt`)
	snaps, err := s.Snapshot(ctx, "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	sh(t, s, `printf changed > a.txt`)
	for _, bad := range []Snapshot{
		{Path: "/workspace/b.txt", Digest: "not-held"},
		{Path: "/etc/passwd", Digest: snaps[0].Digest},
	} {
		if err := s.Restore(ctx, snaps[0], bad); err == nil {
			t.Errorf("Restore with %+v succeeded", bad)
		}
		if got := string(sh(t, s, `cat a.txt`).Stdout); got != "changed" {
			t.Errorf("a Restore refused for %+v wrote a.txt: %q", bad, got)
		}
	}
}
