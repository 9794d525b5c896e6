//go:build linux

package testutil

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// DepthBeyondFDLimit lowers this process's descriptor limit for the test
// (so a chain deeper than it is quick to build) and returns a depth beyond
// it.
func DepthBeyondFDLimit(t testing.TB) int {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	const soft = 1024
	if old.Cur > soft {
		lim := old
		lim.Cur = soft
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
		return soft + 100
	}
	return int(old.Cur) + 100
}

// DeepChain makes dir/d/d/... depth levels deep through descriptors, as a
// guest can, whatever the path length. leaves are directories made at the
// bottom with their modes.
func DeepChain(t testing.TB, dir string, depth int, leaves map[string]uint32) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < depth; i++ {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	defer unix.Close(fd)
	for name, mode := range leaves {
		if err := unix.Mkdirat(fd, name, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// SwapRacer keeps exchanging d/dir with d/link (renameat2
// RENAME_EXCHANGE) for each d in dirs, as a guest can, until the returned
// stop is called; stop returns once the racer has ended.
func SwapRacer(dirs []string) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			for _, d := range dirs {
				_ = unix.Renameat2(unix.AT_FDCWD, filepath.Join(d, "dir"), unix.AT_FDCWD, filepath.Join(d, "link"), unix.RENAME_EXCHANGE)
			}
		}
	}()
	return func() {
		done.Store(true)
		wg.Wait()
	}
}

// RunUnprivileged runs the tests of this test binary whose names match
// pattern again as uid 65534 (through setpriv), with HOME and TMPDIR a
// directory of its own, and fails unless they pass. It skips when the
// process is not root or setpriv is missing.
func RunUnprivileged(t *testing.T, pattern string, env ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged, or cannot become so")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip(err)
	}
	// Not t.TempDir: its parent is root's alone.
	dir, err := os.MkdirTemp("", "oma-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	if err := copyExecutable(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := errors.Join(os.Chmod(dir, 0o755), os.Mkdir(home, 0o700), os.Chown(home, 65534, 65534)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		bin, "-test.run", pattern, "-test.count=1")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home}, env...)
	cmd.Dir = home
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	}
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
