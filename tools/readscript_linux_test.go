package tools

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// The agent's read builtin prints what readScript's perl pass prints, run
// as the same user (nobody and root when the test is root), for every
// shape of file and window of TestReadScriptPerlMatchesCoreutils, and for
// a missing path, a directory, a file the user may not read and links to
// each.
func TestReadBuiltinMatchesScript(t *testing.T) {
	withPerl, _ := scriptPaths(t)
	dir := sharedTempDir(t)
	files := readScriptFiles()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret"), []byte("x\n"), 0o000))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	for _, link := range []string{"two", "secret", "sub", "none"} {
		require.NoError(t, os.Symlink(link, filepath.Join(dir, "link-"+link)))
	}
	giveToNobody(t, dir)
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(filepath.Join(dir, "secret"), 0, 0))
	}
	compare := func(file string, start, take int) {
		t.Helper()
		args := []string{file, strconv.Itoa(start), strconv.Itoa(take), strconv.Itoa(readMaxBytes), "shown", "\nEND"}
		for who, user := range scriptUsers() {
			script := runScriptAs(t, user, readScript, withPerl, "", args...)
			builtin := runBuiltinAs(t, user, agentwire.BuiltinRead, "", args...)
			assert.Equal(t, script, builtin, "%s from %d take %d as %s: script (first) and builtin (second) differ", file, start, take, who)
		}
	}
	for name, content := range files {
		for _, start := range readScriptStarts(content) {
			for _, take := range []int{1, 3, readMaxLines} {
				compare(filepath.Join(dir, name), start, take)
			}
		}
	}
	for _, name := range []string{"none", "sub", "secret", "link-two", "link-secret", "link-sub", "link-none"} {
		compare(filepath.Join(dir, name), 1, readMaxLines)
	}
}
