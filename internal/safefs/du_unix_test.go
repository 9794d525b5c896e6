//go:build unix

package safefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// chain nests depth directories named d below dir, through descriptors
// (the path is longer than PATH_MAX), and writes a file of n bytes in the
// deepest.
func chain(t *testing.T, dir string, depth, n int) {
	t.Helper()
	fd, err := unix.Open(dir, dirFlags, 0)
	must(t, err)
	for range depth {
		must(t, unix.Mkdirat(fd, "d", 0o755))
		next, err := unix.Openat(fd, "d", dirFlags, 0)
		must(t, err)
		unix.Close(fd)
		fd = next
	}
	defer unix.Close(fd)
	f, err := unix.Openat(fd, "deep", unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	must(t, err)
	defer unix.Close(f)
	_, err = unix.Write(f, make([]byte, n))
	must(t, err)
}

// SizeOf counts regular files only, at any depth, follows no symlink out
// of the tree, and leaves no descriptor open.
func TestSizeOf(t *testing.T) {
	host := t.TempDir()
	must(t, os.WriteFile(filepath.Join(host, "big"), make([]byte, 1<<20), 0o644))
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "top"), []byte("12345"), 0o644))
	must(t, os.Symlink(host, filepath.Join(dir, "hostdir")))
	must(t, os.Symlink(filepath.Join(host, "big"), filepath.Join(dir, "hostfile")))
	chain(t, dir, 3000, 7)
	fds := openFDs(t)
	got, err := SizeOf(context.Background(), dir)
	must(t, err)
	if got != 12 {
		t.Fatalf("SizeOf = %d, want 12", got)
	}
	if now := openFDs(t); now != fds {
		t.Fatalf("%d descriptors open after SizeOf, %d before", now, fds)
	}
}

// A walk ends with its context, however deep the tree.
func TestSizeOfEndsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	chain(t, dir, 100, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := SizeOf(ctx, dir); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("got %v, want context.Canceled naming %s", err, dir)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/dev/fd")
	must(t, err)
	return len(ents)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
