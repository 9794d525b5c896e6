//go:build linux || darwin

package safefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The real msb keeps a volume file's guest owner, mode and type (a symlink
// is a regular file on the host) in user.msb.override_stat: a copy keeps
// the user.* attributes of files and directories, at any depth, and no
// other namespace's.
func TestCopyTreeKeepsUserXattrs(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	const key = "user.msb.override_stat"
	must(t, os.MkdirAll(filepath.Join(src, "d", "e"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "d", "link"), []byte("/etc/passwd"), 0o600))
	must(t, os.WriteFile(filepath.Join(src, "d", "e", "f"), []byte("x"), 0o600))
	set := func(rel, name, value string) {
		t.Helper()
		err := unix.Setxattr(filepath.Join(src, rel), name, []byte(value), 0)
		if errors.Is(err, unix.ENOTSUP) {
			t.Skipf("%s: no extended attributes on this file system", src)
		}
		must(t, err)
	}
	set("d/link", key, "uid=65534 mode=S_IFLNK|0777")
	set("d/e/f", key, "uid=65534 mode=0644")
	set("d", key, "uid=65534 mode=0755")
	set("d/e", "user.other", "kept")
	if os.Geteuid() == 0 {
		set("d/e/f", "trusted.oma", "never copied")
	}

	_, err := CopyTree(context.Background(), src, dst, 1<<20)
	require.NoError(t, err)
	get := func(rel, name string) string {
		t.Helper()
		buf := make([]byte, 256)
		n, err := unix.Getxattr(filepath.Join(dst, rel), name, buf)
		if err != nil {
			return err.Error()
		}
		return string(buf[:n])
	}
	assert.Equal(t, "uid=65534 mode=S_IFLNK|0777", get("d/link", key))
	assert.Equal(t, "uid=65534 mode=0644", get("d/e/f", key))
	assert.Equal(t, "uid=65534 mode=0755", get("d", key))
	assert.Equal(t, "kept", get("d/e", "user.other"))
	if os.Geteuid() == 0 {
		assert.Equal(t, unix.ENODATA.Error(), get("d/e/f", "trusted.oma"))
	}
}

// A guest cannot hide bulk in extended attributes: their values count
// against the budget.
func TestCopyTreeBudgetCountsXattrs(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	value := []byte(strings.Repeat("v", 4000))
	for i := range 20 {
		f := filepath.Join(src, "f"+string(rune('a'+i)))
		must(t, os.WriteFile(f, nil, 0o600))
		err := unix.Setxattr(f, "user.bulk", value, 0)
		if errors.Is(err, unix.ENOTSUP) {
			t.Skipf("%s: no extended attributes on this file system", src)
		}
		must(t, err)
	}
	_, err := CopyTree(context.Background(), src, dst, 50_000)
	require.ErrorIs(t, err, ErrCopyBudget)
	left, err := os.ReadDir(dst)
	require.NoError(t, err)
	assert.Empty(t, left, "a failed copy leaves nothing")
	_, err = CopyTree(context.Background(), src, dst, 100_000)
	require.NoError(t, err)
}
