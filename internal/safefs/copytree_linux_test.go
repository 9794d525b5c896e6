package safefs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// A tree deeper than the process may hold descriptors is copied whole, a
// hard link from its top to its bottom kept, with a handful of descriptors
// open during the copy and none left after it.
func TestCopyTreeDeeperThanTheDescriptorLimit(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	depth := testutil.DepthBeyondFDLimit(t)
	chain(t, src, depth, 5)
	deep := filepath.Join(strings.Repeat("d/", depth), "deep")
	must(t, os.Link(filepath.Join(src, deep), filepath.Join(src, "top")))
	must(t, os.Chmod(filepath.Join(src, filepath.Dir(deep)), 0o555))

	before, most := openFDs(t), 0
	ctx := hookCtx{Context: context.Background(), hook: func() { most = max(most, openFDs(t)) }}
	if _, err := CopyTree(ctx, src, dst, 1<<20); err != nil {
		t.Fatal(err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open after the copy, %d before", after, before)
	}
	if most > before+8 {
		t.Fatalf("%d descriptors open during the copy, %d before", most, before)
	}
	fi, err := os.Stat(filepath.Join(dst, deep))
	must(t, err)
	top, err := os.Stat(filepath.Join(dst, "top"))
	must(t, err)
	if fi.Size() != 5 || !os.SameFile(fi, top) {
		t.Fatalf("deepest file: %d bytes, linked to top: %v; want 5, true", fi.Size(), os.SameFile(fi, top))
	}
	di, err := os.Stat(filepath.Join(dst, filepath.Dir(deep)))
	must(t, err)
	if di.Mode().Perm() != 0o555 {
		t.Fatalf("deepest directory mode %v, want 0555", di.Mode().Perm())
	}
}

// A mount below the source is not the guest's tree: it is skipped, named
// among the skipped entries, and nothing on it is copied.
func TestCopyTreeSkipsMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	src, dst := t.TempDir(), t.TempDir()
	mnt := filepath.Join(src, "mnt")
	must(t, os.Mkdir(mnt, 0o755))
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	must(t, os.WriteFile(filepath.Join(mnt, "f"), []byte("on the mount"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "keep"), []byte("guest"), 0o644))

	skipped, err := CopyTree(context.Background(), src, dst, 1<<20)
	must(t, err)
	if len(skipped) != 1 || skipped[0] != "mnt" {
		t.Fatalf("skipped = %q, want [mnt]", skipped)
	}
	if _, err := os.Lstat(filepath.Join(dst, "mnt")); !os.IsNotExist(err) {
		t.Fatalf("the mount point was copied: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(dst, "keep")); err != nil || string(data) != "guest" {
		t.Fatalf("keep: %q, %v", data, err)
	}
}
