//go:build linux

package guestagent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/outputs"
)

// A tree far deeper than the open-file limit leaves is walked whole by
// glob and the listing: they hold heldLevels directories open at most,
// coming back up through "..".
func TestWalksOfADeepTreeHoldFewDescriptors(t *testing.T) {
	root := t.TempDir()
	dir := root
	for i := 1; i <= 4*heldLevels; i++ {
		dir = filepath.Join(dir, "d")
		require.NoError(t, os.Mkdir(dir, 0o755))
		if i == heldLevels+1 || i == 3*heldLevels {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644))
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bottom"), []byte("x"), 0o644))
	want := []string{
		strings.Repeat("d/", heldLevels+1) + "f",
		strings.Repeat("d/", 3*heldLevels) + "f",
		strings.Repeat("d/", 4*heldLevels) + "bottom",
	}

	withOpenFileLimit(t, heldLevels+16, func() {
		code, out, stderr := runHere(t, agentwire.BuiltinGlobEnumerate, nil, glob.EnumerationArgs(root, glob.NewToken("glob"), glob.Narrowing{})...)
		assert.Equal(t, 0, code)
		assert.Empty(t, stderr)
		for _, p := range want {
			assert.Contains(t, string(out), "\x00./"+p+"\x00")
		}

		code, out, stderr = runHere(t, agentwire.BuiltinOutputsList, nil, outputs.ListingArgs(root, outputs.Policy{})...)
		assert.Equal(t, 0, code, stderr)
		for _, p := range want {
			assert.Contains(t, string(out), "\x00"+p+"\x00f\x00")
		}
	})
}

// withOpenFileLimit runs fn with this process's open-file limit at n
// descriptors more than it has open.
func withOpenFileLimit(t *testing.T, n int, fn func()) {
	t.Helper()
	open, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	var was unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &was))
	low := was
	low.Cur = uint64(len(open) + n)
	require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &low))
	defer func() { require.NoError(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &was)) }()
	fn()
}

// Coming back up through "..", a walk checks it is where it left: a
// directory moved meanwhile ends the walk there rather than letting it go
// on in the directory's new parent.
func TestDescendNoticesAMovedDirectory(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/b", "elsewhere"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	open := func(p string) int {
		fd, err := unix.Open(filepath.Join(root, p), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		return fd
	}
	fd, err := descend(open("a"), open("a/b"), heldLevels, func(sub int) int {
		require.NoError(t, os.Rename(filepath.Join(root, "a/b"), filepath.Join(root, "elsewhere/b")))
		return sub
	})
	assert.ErrorIs(t, err, errMoved)
	assert.Equal(t, -1, fd)

	// A walk that lost its place below is not reported again above it.
	fd, err = descend(open("a"), open("a"), heldLevels, func(sub int) int {
		unix.Close(sub)
		return -1
	})
	assert.ErrorIs(t, err, errLost)
	assert.Equal(t, -1, fd)

	// Above heldLevels the directory stays open: nothing to come back to.
	a := open("a")
	defer unix.Close(a)
	fd, err = descend(a, open("elsewhere/b"), heldLevels-1, func(sub int) int { return sub })
	assert.NoError(t, err)
	assert.Equal(t, a, fd)
}
