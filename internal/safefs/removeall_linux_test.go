package safefs

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

func TestRemoveAllDeeperThanTheDescriptorLimit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.DeepChain(t, dir, testutil.DepthBeyondFDLimit(t), map[string]uint32{"last": 0o000})
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
		var swaps []string
		for i := 0; i < pairs; i++ {
			d := filepath.Join(dir, "p"+strconv.Itoa(i))
			swaps = append(swaps, d)
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
		stop := testutil.SwapRacer(swaps)
		err := RemoveAll(dir)
		stop()
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

// Two removals of one tree at once (`session rm` beside the reaper) both
// succeed: a directory the other one removed while this one read it is
// gone, not a failure.
func TestRemoveAllTwiceAtOnce(t *testing.T) {
	for round := range 10 {
		dir := filepath.Join(t.TempDir(), "tree")
		for i := range 8 {
			sub := filepath.Join(dir, strconv.Itoa(i), "a", "b", "c")
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			for j := range 10 {
				if err := os.WriteFile(filepath.Join(sub, strconv.Itoa(j)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		errs := make(chan error, 3)
		for range cap(errs) {
			go func() { errs <- RemoveAll(dir) }()
		}
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Fatalf("round %d: tree still there: %v", round, err)
		}
	}
}
