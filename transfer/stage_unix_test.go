//go:build unix

package transfer

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// Parents made for dest before making dest itself failed are removed again.
func TestOpenStageFailureRemovesWhatItMade(t *testing.T) {
	root := t.TempDir()
	_, err := openStage(filepath.Join(root, "new", strings.Repeat("x", 300)))
	require.Error(t, err)
	assert.NoDirExists(t, filepath.Join(root, "new"))
}

// A file that cannot be staged (a full disk; here a file size limit) fails
// the fetch with an error naming it.
func TestStagingFailureNamesTheFile(t *testing.T) {
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old))
	lowered := old
	lowered.Cur = 64 << 10
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lowered))
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old) })

	st, err := openStage(t.TempDir())
	require.NoError(t, err)
	defer st.close()
	big := strings.Repeat("x", 128<<10)
	sum := sha256.Sum256([]byte(big))
	rec := outputs.Record{Path: "big.bin", Size: int64(len(big)), SHA256: hex.EncodeToString(sum[:])}
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rec.Path, Size: rec.Size, Mode: 0o644}))
	_, err = tw.Write([]byte(big))
	require.NoError(t, err)
	require.NoError(t, tw.Close())

	_, _, err = readArchive(&archive, []outputs.Record{rec}, st.sink)
	require.ErrorIs(t, err, syscall.EFBIG)
	assert.Contains(t, err.Error(), `"big.bin"`)
}

// An undo step that fails (here in a directory the host made append-only)
// names what it left in dest.
func TestInstallUndoFailureNamesWhatStays(t *testing.T) {
	dest := t.TempDir()
	ao := filepath.Join(dest, "ao")
	require.NoError(t, os.Mkdir(ao, 0o755))
	if out, err := exec.Command("chattr", "+a", ao).CombinedOutput(); err != nil {
		t.Skipf("no append-only directory here: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-a", ao).Run() })

	st, err := openStage(dest)
	require.NoError(t, err)
	defer st.close()
	files := []File{stageFile(t, st, "ao/f", "f"), stageFile(t, st, "z", "z")}
	require.NoError(t, os.Remove(filepath.Join(dest, st.name, st.staged["z"])))
	_, _, err = st.install(files, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "undoing what was placed: remove "+filepath.Join(ao, "f")+": ")
}

// A dest that is not a directory is refused at once, a FIFO too (opening
// one to read waited for a writer).
func TestOpenStageRefusesADestThatIsNoDirectory(t *testing.T) {
	root := t.TempDir()
	fifo := filepath.Join(root, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	file := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, dest := range []string{fifo, file} {
		done := make(chan error, 1)
		go func() {
			st, err := openStage(dest)
			if err == nil {
				st.close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			assert.ErrorContains(t, err, dest+" is not a directory")
		case <-time.After(5 * time.Second):
			// Let the blocked open end before the test does.
			if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
			t.Fatalf("openStage(%s) still waiting after 5s", dest)
		}
	}
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "nothing made beside them")
}
