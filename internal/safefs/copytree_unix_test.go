//go:build unix

package safefs

import (
	"context"
	"os"
	"path/filepath"
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

	skipped, err := CopyTree(context.Background(), src, dst)
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
	if _, err := CopyTree(context.Background(), link, dst); err == nil {
		t.Fatal("a symlinked source was followed")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
