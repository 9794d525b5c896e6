package safefs

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// deepChain makes dir/d/d/... depth levels deep through descriptors, as a
// guest can, whatever the path length.
func deepChain(t *testing.T, dir string, depth int) {
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
	if err := unix.Mkdirat(fd, "last", 0o000); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
}

// depthBeyondFDLimit lowers this process's descriptor limit for the test
// (so the chain is quick to build) and returns a depth beyond it.
func depthBeyondFDLimit(t *testing.T) int {
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

func TestRemoveAllDeeperThanTheDescriptorLimit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	deepChain(t, dir, depthBeyondFDLimit(t))
	if err := RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("tree still there: %v", err)
	}
}

func TestRemoveAllNeverFollowsSymlinks(t *testing.T) {
	host := t.TempDir()
	if err := os.Chmod(host, 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "keep"), []byte("host"), 0o640); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{filepath.Join(dir, "link"), filepath.Join(dir, "a", "b", "link")} {
		if err := os.Symlink(host, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "a"), 0o000); err != nil {
		t.Fatal(err)
	}
	// The top itself a symlink: the link goes, not its target.
	top := filepath.Join(t.TempDir(), "toplink")
	if err := os.Symlink(host, top); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, top} {
		if err := RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s still there: %v", p, err)
		}
	}
	hostIntact(t, host, 0o751)
	if err := RemoveAll(filepath.Join(t.TempDir(), "missing")); err != nil {
		t.Fatalf("missing path: %v", err)
	}
}

func hostIntact(t *testing.T, host string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(host)
	if err != nil || fi.Mode().Perm() != mode {
		t.Fatalf("host directory changed: %v %v", fi.Mode(), err)
	}
	if data, err := os.ReadFile(filepath.Join(host, "keep")); err != nil || string(data) != "host" {
		t.Fatalf("host file changed: %q %v", data, err)
	}
	if fi, err := os.Stat(filepath.Join(host, "keep")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("host file mode changed: %v", fi.Mode())
	}
}

// TestRemoveAllUnderSymlinkSwaps removes a tree while a racer keeps
// exchanging directories with symlinks to a host directory
// (renameat2 RENAME_EXCHANGE), as a guest can: the host directory keeps
// its mode and contents every time.
func TestRemoveAllUnderSymlinkSwaps(t *testing.T) {
	const tries, pairs = 20, 40
	host := t.TempDir()
	if err := os.Chmod(host, 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "keep"), []byte("host"), 0o640); err != nil {
		t.Fatal(err)
	}
	for try := 0; try < tries; try++ {
		dir := filepath.Join(t.TempDir(), "tree")
		for i := 0; i < pairs; i++ {
			d := filepath.Join(dir, "p"+strconv.Itoa(i))
			if err := os.MkdirAll(filepath.Join(d, "dir", "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(d, "dir"), 0o500); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(host, filepath.Join(d, "link")); err != nil {
				t.Fatal(err)
			}
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for i := 0; i < pairs; i++ {
					d := filepath.Join(dir, "p"+strconv.Itoa(i))
					_ = unix.Renameat2(unix.AT_FDCWD, filepath.Join(d, "dir"), unix.AT_FDCWD, filepath.Join(d, "link"), unix.RENAME_EXCHANGE)
				}
			}
		}()
		err := RemoveAll(dir)
		stop.Store(true)
		wg.Wait()
		if err != nil {
			t.Fatalf("try %d: %v", try, err)
		}
		hostIntact(t, host, 0o751)
	}
}

func TestRemoveAllRefusesMountCrossings(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	dir := filepath.Join(t.TempDir(), "tree")
	mnt := filepath.Join(dir, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(mnt, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(dir); err == nil {
		t.Fatal("removal crossed into a mount")
	}
	if _, err := os.Stat(filepath.Join(mnt, "f")); err != nil {
		t.Fatalf("file on the mount removed: %v", err)
	}
}
