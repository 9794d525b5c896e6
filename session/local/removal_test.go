//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// hostDirIntact fails unless host still has mode 0751 and its file.
func hostDirIntact(t *testing.T, host string) {
	t.Helper()
	for p, mode := range map[string]os.FileMode{host: 0o751, filepath.Join(host, "sub"): 0o751, filepath.Join(host, "sub", "keep"): 0o640} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("host path %s changed: %v %v", p, fi.Mode(), err)
		}
	}
	if data, err := os.ReadFile(filepath.Join(host, "sub", "keep")); err != nil || string(data) != "host" {
		t.Fatalf("host file changed: %q %v", data, err)
	}
}

// TestRemovalNeverFollowsGuestSymlinkSwaps closes sessions whose
// workspace holds a chain deeper than the descriptor limit (the guest's
// way to make a naive removal fail) while a racer keeps exchanging
// directories with symlinks to a host directory (renameat2
// RENAME_EXCHANGE). The host directory keeps its modes and contents every
// time, and each session is removed whole.
func TestRemovalNeverFollowsGuestSymlinkSwaps(t *testing.T) {
	depth := testutil.DepthBeyondFDLimit(t)
	host := t.TempDir()
	if err := os.MkdirAll(filepath.Join(host, "sub"), 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "sub", "keep"), []byte("host"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(host, 0o751); err != nil {
		t.Fatal(err)
	}
	const tries, pairs = 4, 40
	stateDir := t.TempDir()
	for try := 0; try < tries; try++ {
		s, err := Create(context.Background(), Options{StateDir: stateDir})
		if err != nil {
			t.Fatal(err)
		}
		testutil.DeepChain(t, s.dirs.Workspace, depth, nil)
		swap := filepath.Join(s.dirs.Workspace, "swap")
		var swaps []string
		for i := 0; i < pairs; i++ {
			d := filepath.Join(swap, strconv.Itoa(i))
			swaps = append(swaps, d)
			if err := os.MkdirAll(filepath.Join(d, "dir", "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(host, filepath.Join(d, "link")); err != nil {
				t.Fatal(err)
			}
		}
		stop := testutil.SwapRacer(swaps)
		err = s.Close(context.Background())
		stop()
		hostDirIntact(t, host)
		if err != nil {
			t.Fatalf("try %d: Close: %v", try, err)
		}
		if _, err := os.Lstat(s.dirs.Root); !os.IsNotExist(err) {
			t.Fatalf("try %d: session directory left: %v", try, err)
		}
	}
}

// TestDeepTreeIsRemovedAndNeverForgotten: a chain deeper than the
// descriptor limit is removed; a removal that cannot finish keeps the
// session's record, so it is still listed, and a later reap finishes it.
func TestDeepTreeIsRemovedAndNeverForgotten(t *testing.T) {
	depth := testutil.DepthBeyondFDLimit(t)
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Create(ctx, Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	testutil.DeepChain(t, s.dirs.Workspace, depth, nil)
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close of a deep tree: %v", err)
	}
	if _, err := os.Lstat(s.dirs.Root); !os.IsNotExist(err) {
		t.Fatalf("session directory left: %v", err)
	}

	if os.Geteuid() != 0 {
		t.Skip("needs root to make a removal fail (a mount inside the workspace)")
	}
	s, err = Create(ctx, Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	testutil.DeepChain(t, s.dirs.Workspace, depth, nil)
	mnt := filepath.Join(s.dirs.Workspace, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	mounted := true
	defer func() {
		if mounted {
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
	}()
	if err := s.Close(ctx); err == nil {
		t.Fatal("Close removed across a mount")
	}
	infos, err := List(dir)
	if err != nil || len(infos) != 1 || infos[0].Name != s.Name() {
		t.Fatalf("unfinished removal forgot the session: %v %+v", err, infos)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	rep, err := Reap(ctx, dir, 0, time.Now().Add(time.Second), false)
	if err != nil || len(rep.Removed) != 1 {
		t.Fatalf("reap: %v %+v", err, rep)
	}
	if _, err := os.Lstat(s.dirs.Root); !os.IsNotExist(err) {
		t.Fatalf("session directory left after reap: %v", err)
	}
	_ = s.Close(ctx)
}

// TestCloseStopsCallsOfOtherProcesses: a call running through another
// handle (as from another CLI process) is killed before the session's
// files are removed.
func TestCloseStopsCallsOfOtherProcesses(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := newTestSession(t, Options{StateDir: dir})
	other, err := Attach(ctx, dir, s.Name())
	if err != nil {
		t.Fatal(err)
	}
	marker := "oma-test-other-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := other.Shell(cctx, session.Command{Script: `exec -a "$1" sleep 100`, Args: []string{marker}}, session.ShellOptions{})
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); len(procsWith(marker)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call did not start")
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cancel()
		<-done
		t.Fatal("the other handle's call survived Close")
	}
	noProcs(t, marker)
	if err := other.Close(ctx); err != nil {
		t.Fatalf("Close through the other handle: %v", err)
	}
}

// TestTwoRemovalsAtOnce: two processes remove the same session at once
// (session rm beside the reaper): both succeed, and nothing is left.
func TestTwoRemovalsAtOnce(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for try := range 3 {
		s, err := Create(ctx, Options{StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(ctx) })
		sh(t, s, `mkdir -p a/b/c d && for i in $(seq 500); do : > a/b/c/$i; : > d/$i; done; sleep 100 >/dev/null 2>&1 &`)
		other, err := Attach(ctx, dir, s.Name())
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		go func() { errs <- s.Close(ctx) }()
		go func() { errs <- other.Close(ctx) }()
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("try %d: a removal failed: %v", try, err)
			}
		}
		if _, err := os.Lstat(s.dirs.Root); !os.IsNotExist(err) {
			t.Fatalf("try %d: session directory left: %v", try, err)
		}
		noProcs(t, s.Name())
	}
}

// TestStateDirOthersCanWriteIsRefused: in a state directory another user
// can write in (theirs, or open to all, sticky or not) they can put a
// directory of theirs under a session's name, holding links to host files
// where the host writes its marks: a Reap (root's cron) removing it wrote
// through such a link, emptying the host file. (Where the directory is not
// sticky they can also put it in the place of a session of the host's.)
// Create, List and Reap refuse such a directory.
func TestStateDirOthersCanWriteIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a directory of another user's")
	}
	ctx := context.Background()
	const other = 4242
	for _, tc := range []struct {
		name string
		uid  int
		mode os.FileMode
	}{{"another user's", other, 0o755}, {"writable by all", 0, 0o777}, {"sticky, writable by all", 0, 0o777 | os.ModeSticky}} {
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte("host"), 0o600); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, tc.uid, tc.uid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, tc.mode); err != nil {
			t.Fatal(err)
		}
		// The other user's directory, under a session's name.
		planted := filepath.Join(dir, "oma-local-x-x-mxdehqay-abcdef")
		if err := os.Mkdir(planted, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, filepath.Join(planted, removingFile)); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{planted, filepath.Join(planted, removingFile)} {
			if err := os.Lchown(p, other, other); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Reap(ctx, dir, time.Minute, time.Now().Add(time.Hour), false); err == nil {
			t.Errorf("Reap of a state directory %s: no error", tc.name)
		}
		if data, _ := os.ReadFile(victim); string(data) != "host" {
			t.Errorf("Reap of a state directory %s left the host file %q", tc.name, data)
		}
		if _, err := List(dir); err == nil {
			t.Errorf("List of a state directory %s: no error", tc.name)
		}
		if s, err := Create(ctx, Options{StateDir: dir}); err == nil {
			_ = s.Close(ctx)
			t.Errorf("Create in a state directory %s: no error", tc.name)
		}
	}
}
