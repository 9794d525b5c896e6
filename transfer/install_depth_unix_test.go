//go:build unix

package transfer

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Outputs within the documented limits (100 files, paths of 4096 bytes)
// can be 2,000 directories deep each (600 here, under a limit of 1024): installing them must not hold a
// descriptor per directory, or a guest makes the whole collection fail
// (and the host process, which may serve other sessions, run out of
// descriptors) with a few deep files.
func TestInstallDeepPathsHoldFewDescriptors(t *testing.T) {
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old))
	lowered := old
	lowered.Cur = min(old.Cur, 1024)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered))
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })

	dest := t.TempDir()
	st, err := openStage(dest)
	require.NoError(t, err)
	defer st.close()
	deep := strings.Repeat("a/", 600)
	var files []File
	for _, top := range []string{"d0", "d1", "d2"} {
		files = append(files, stageFile(t, st, top+"/"+deep+"f", top))
	}
	placed, refused, err := st.install(files, false)
	require.NoError(t, err)
	assert.Empty(t, refused)
	assert.Len(t, placed, 3)
	data, err := os.ReadFile(filepath.Join(dest, "d2", filepath.FromSlash(deep), "f"))
	require.NoError(t, err)
	assert.Equal(t, "d2", string(data))

	// A failure after them undoes every deep step, through the same cursor.
	before := tree(t, dest)
	st2, err := openStage(dest)
	require.NoError(t, err)
	files = nil
	for _, top := range []string{"e0", "e1", "z"} {
		files = append(files, stageFile(t, st2, top+"/"+deep+"f", top))
	}
	require.NoError(t, os.Remove(filepath.Join(dest, st2.name, st2.staged[files[2].Path])))
	_, _, err = st2.install(files, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "place ")
	assert.NotContains(t, err.Error(), "undoing")
	st2.close()
	assert.Equal(t, before, tree(t, dest))
}

// The cursor goes up only into the directory it came down through: a
// directory moved out of dest while the cursor is below it fails the next
// move, rather than let the cursor go on, and make directories, outside.
func TestCursorRefusesToClimbOutOfAMovedDirectory(t *testing.T) {
	dest, outside := t.TempDir(), t.TempDir()
	st, err := openStage(dest)
	require.NoError(t, err)
	defer st.close()
	c := &cursor{st: st, root: int(st.destDir.Fd())}
	c.fd, c.rel = c.root, "."
	defer c.release()
	var undos []undo
	reason, err := c.moveTo("p/a/b", &undos)
	require.NoError(t, err)
	require.Empty(t, reason)
	require.NoError(t, os.Rename(filepath.Join(dest, "p", "a"), filepath.Join(outside, "a")))

	_, err = c.moveTo("p/c", &undos)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "moved during the collection")
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing made outside dest")
	assert.Equal(t, "a", entries[0].Name())
}
