//go:build linux || darwin

package safefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestCopyTreeNeverFollowsLinks: a symlink to a host file outside the tree
// (and one to a directory) is copied as a link; the host file's content
// never lands in the copy. Files, modes and nesting are kept; a FIFO is
// skipped without blocking.
func TestCopyTreeNeverFollowsLinks(t *testing.T) {
	host := t.TempDir()
	secret := filepath.Join(host, "secret")
	must(t, os.WriteFile(secret, []byte("host secret"), 0o600))
	src, dst := t.TempDir(), t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "a", "b"), 0o750))
	must(t, os.WriteFile(filepath.Join(src, "a", "b", "f.txt"), []byte("data"), 0o640))
	must(t, os.Symlink(secret, filepath.Join(src, "leak")))
	must(t, os.Symlink(host, filepath.Join(src, "a", "hostdir")))
	must(t, syscall.Mkfifo(filepath.Join(src, "pipe"), 0o600))

	skipped, err := CopyTree(context.Background(), src, dst, 1<<20)
	must(t, err)
	if len(skipped) != 1 || skipped[0] != "pipe" {
		t.Fatalf("skipped = %q, want [pipe]", skipped)
	}
	for link, want := range map[string]string{"leak": secret, "a/hostdir": host} {
		fi, err := os.Lstat(filepath.Join(dst, link))
		must(t, err)
		if fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("%s copied as %v, want a symlink", link, fi.Mode())
		}
		got, err := os.Readlink(filepath.Join(dst, link))
		must(t, err)
		if got != want {
			t.Fatalf("%s -> %q, want %q", link, got, want)
		}
	}
	data, err := os.ReadFile(filepath.Join(dst, "a", "b", "f.txt"))
	must(t, err)
	if string(data) != "data" {
		t.Fatalf("f.txt = %q", data)
	}
	fi, err := os.Stat(filepath.Join(dst, "a", "b", "f.txt"))
	must(t, err)
	if fi.Mode().Perm() != 0o640 {
		t.Fatalf("f.txt mode %v, want 0640", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Join(dst, "a"))
	must(t, err)
	if di.Mode().Perm() != 0o750 {
		t.Fatalf("a mode %v, want 0750", di.Mode().Perm())
	}
}

// TestCopyTreeRefusesSymlinkedRoots: the source given as a symlink is
// refused, not followed.
func TestCopyTreeRefusesSymlinkedRoots(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(src, link))
	if _, err := CopyTree(context.Background(), link, dst, 1<<20); err == nil {
		t.Fatal("a symlinked source was followed")
	}
}

// allocated is the disk space the files below root take, each inode once.
func allocated(t *testing.T, root string) int64 {
	t.Helper()
	seen := map[uint64]bool{}
	var n int64
	must(t, filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		must(t, err)
		fi, err := os.Lstat(p)
		must(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().IsRegular() && !seen[uint64(st.Ino)] {
			seen[uint64(st.Ino)] = true
			n += int64(st.Blocks) * 512
		}
		return nil
	}))
	return n
}

// A guest that spends nothing (a sparse file and hard links to it) must
// not make a fork write gigabytes: holes stay holes, links stay links, and
// the data between the holes is kept.
func TestCopyTreeKeepsHolesAndHardLinks(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	const size = 64 << 20
	f, err := os.Create(filepath.Join(src, "f"))
	must(t, err)
	must(t, f.Truncate(size))
	_, err = f.WriteAt([]byte("data in the middle"), size/2)
	must(t, err)
	must(t, f.Close())
	must(t, os.Mkdir(filepath.Join(src, "d"), 0o755))
	for _, l := range []string{"l1", "l2", "d/l3"} {
		must(t, os.Link(filepath.Join(src, "f"), filepath.Join(src, l)))
	}
	if a := allocated(t, src); a > 1<<20 {
		t.Skipf("this file system allocates %d bytes for a sparse file", a)
	}

	if _, err := CopyTree(context.Background(), src, dst, 1<<20); err != nil {
		t.Fatal(err)
	}
	if a := allocated(t, dst); a > 1<<20 {
		t.Fatalf("the copy allocated %d bytes on the host for %d bytes of data", a, len("data in the middle"))
	}
	fi, err := os.Stat(filepath.Join(dst, "f"))
	must(t, err)
	if n := fi.Sys().(*syscall.Stat_t).Nlink; fi.Size() != size || n != 4 {
		t.Fatalf("f: size %d, %d links; want %d, 4", fi.Size(), n, size)
	}
	for _, l := range []string{"l1", "l2", "d/l3"} {
		li, err := os.Stat(filepath.Join(dst, l))
		must(t, err)
		if !os.SameFile(fi, li) {
			t.Fatalf("%s is not a link to f", l)
		}
	}
	got := make([]byte, len("data in the middle"))
	g, err := os.Open(filepath.Join(dst, "d", "l3"))
	must(t, err)
	defer g.Close()
	_, err = g.ReadAt(got, size/2)
	must(t, err)
	if string(got) != "data in the middle" {
		t.Fatalf("data %q", got)
	}
}

// Past its byte budget a copy fails naming the budget, and leaves the
// destination empty.
func TestCopyTreeBudget(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "a", "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "a", "small"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "a", "b", "big"), make([]byte, 2<<20), 0o644))
	_, err := CopyTree(context.Background(), src, dst, 1<<20)
	if !errors.Is(err, ErrCopyBudget) || !strings.Contains(err.Error(), "more than 1048576 bytes of file data") {
		t.Fatalf("got %v, want ErrCopyBudget naming 1048576 bytes", err)
	}
	if left, _ := os.ReadDir(dst); len(left) != 0 {
		t.Fatalf("the failed copy left %v", left)
	}
}

// hookCtx runs hook whenever CopyTree asks Err, which it does before each
// entry it copies: it stands for a guest acting while the copy runs.
type hookCtx struct {
	context.Context
	hook func()
}

func (h hookCtx) Err() error {
	h.hook()
	return h.Context.Err()
}

// A guest that moves a directory the copy is in, out of the tree, makes
// the copy fail with ErrMoved and leave the destination empty; the copy
// never goes on in the directory ".." then leads to, whose entries have
// the names the rest of the tree has.
func TestCopyTreeFailsWhenADirectoryMoves(t *testing.T) {
	base, dst := t.TempDir(), t.TempDir()
	src, outside := filepath.Join(base, "src"), filepath.Join(base, "outside")
	must(t, os.MkdirAll(filepath.Join(src, "a", "b", "c"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "a", "b", "c", "f"), []byte("guest"), 0o644))
	must(t, os.Mkdir(outside, 0o755))
	for i := range 10 {
		name := "z" + strconv.Itoa(i)
		must(t, os.WriteFile(filepath.Join(src, "a", name), []byte("guest"), 0o644))
		must(t, os.WriteFile(filepath.Join(outside, name), []byte("host secret"), 0o644))
	}

	moved, leaked := false, ""
	ctx := hookCtx{Context: context.Background(), hook: func() {
		if _, err := os.Lstat(filepath.Join(dst, "a", "b")); err == nil && !moved {
			must(t, os.Rename(filepath.Join(src, "a", "b"), filepath.Join(outside, "b")))
			moved = true
		}
		_ = filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if data, _ := os.ReadFile(p); string(data) == "host secret" {
					leaked = p
				}
			}
			return nil
		})
	}}
	_, err := CopyTree(ctx, src, dst, 1<<20)
	if !moved {
		t.Fatal("the copy never reached a/b")
	}
	if !errors.Is(err, ErrMoved) || !strings.Contains(err.Error(), "a/b: ") {
		t.Fatalf("got %v, want ErrMoved naming a/b", err)
	}
	if leaked != "" {
		t.Fatalf("a host file outside the tree was copied to %s", leaked)
	}
	if left, _ := os.ReadDir(dst); len(left) != 0 {
		t.Fatalf("the failed copy left %v", left)
	}
}

// A hard link is made from the copy of the file's first name; a guest
// that swaps the directory holding that copy for a symlink to a host
// directory (the fork's guest writes to the copy while it is made) must
// not get a hard link to the host file of the same name.
func TestCopyTreeHardLinkNeverFollowsASwappedDirectory(t *testing.T) {
	base, dst := t.TempDir(), t.TempDir()
	src, host := filepath.Join(base, "src"), filepath.Join(base, "host")
	must(t, os.MkdirAll(filepath.Join(src, "a"), 0o755))
	must(t, os.MkdirAll(filepath.Join(src, "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "a", "f"), []byte("guest"), 0o644))
	must(t, os.Link(filepath.Join(src, "a", "f"), filepath.Join(src, "b", "f")))
	for _, d := range []string{"a", "b"} {
		must(t, os.MkdirAll(filepath.Join(host, d), 0o755))
		must(t, os.WriteFile(filepath.Join(host, d, "f"), []byte("host secret"), 0o644))
	}

	swapped := false
	ctx := hookCtx{Context: context.Background(), hook: func() {
		for _, d := range []string{"a", "b"} {
			if fi, err := os.Lstat(filepath.Join(dst, d, "f")); err == nil && fi.Mode().IsRegular() && !swapped {
				must(t, os.Rename(filepath.Join(dst, d), filepath.Join(dst, d+".moved")))
				must(t, os.Symlink(filepath.Join(host, d), filepath.Join(dst, d)))
				swapped = true
			}
		}
	}}
	_, _ = CopyTree(ctx, src, dst, 1<<20)
	if !swapped {
		t.Fatal("the copy never copied the first name")
	}
	for _, d := range []string{"a", "b"} {
		hi, err := os.Stat(filepath.Join(host, d, "f"))
		must(t, err)
		if n := hi.Sys().(*syscall.Stat_t).Nlink; n != 1 {
			t.Fatalf("host file %s/f has %d links: the copy linked it into the guest's tree", d, n)
		}
	}
}
