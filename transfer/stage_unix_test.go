//go:build unix

package transfer

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/outputs"
)

func stageFile(t *testing.T, st *stage, path, content string) File {
	t.Helper()
	sum := sha256.Sum256([]byte(content))
	rec := outputs.Record{Path: path, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}
	w, done, err := st.sink(rec)
	require.NoError(t, err)
	_, err = w.Write([]byte(content))
	require.NoError(t, err)
	require.NoError(t, done(true))
	return File{Path: rec.Path, Size: rec.Size, SHA256: rec.SHA256}
}

func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	require.NoError(t, filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, p)
		b, _ := os.ReadFile(p)
		m[rel] = fi.Mode().String() + " " + string(b)
		return nil
	}))
	return m
}

// A failure while moving files in — after several were placed, one of them
// replacing a host file — undoes every step: dest is as it was.
func TestInstallUndoesEverythingOnFailure(t *testing.T) {
	dest := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dest, "report.txt"), []byte("host"), 0o644))
	before := tree(t, dest)

	st, err := openStage(dest)
	require.NoError(t, err)
	files := []File{
		stageFile(t, st, "a.txt", "a"),
		stageFile(t, st, "new/dir/b.txt", "b"),
		stageFile(t, st, "report.txt", "guest"),
		stageFile(t, st, "z.txt", "z"),
	}
	// The last staged file disappears: placing it fails for a host reason.
	require.NoError(t, os.Remove(filepath.Join(dest, st.name, st.staged["z.txt"])))
	placed, refused, err := st.install(files, true)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "place "+filepath.Join(dest, "z.txt"))
	assert.Nil(t, placed)
	assert.Nil(t, refused)
	st.close()
	assert.Equal(t, before, tree(t, dest))
}

func TestStageCloseRemovesWhatItMade(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "a", "b")
	st, err := openStage(dest)
	require.NoError(t, err)
	stageFile(t, st, "x", "x")
	assert.True(t, strings.HasPrefix(st.name, ".oma-outputs-"))
	fi, err := os.Stat(filepath.Join(dest, st.name))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "private while it holds unverified bytes")
	st.close()
	assert.NoDirExists(t, filepath.Dir(dest))
}
