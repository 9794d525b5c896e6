package transfer_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/outputs"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// forged is a guest that answers the outputs' listing and fetch with
// whatever bytes a test gives it: the most a hostile guest can do.
type forged struct {
	session.Session // nil: only Shell and Paths are used
	listing         []byte
	archive         []byte
	fetches         int
}

func (f *forged) Paths() session.Paths { return session.Paths{Outputs: "/mnt/session/outputs"} }

func (f *forged) Shell(_ context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	switch cmd.Builtin {
	case agentwire.BuiltinOutputsList:
		return &session.Result{Stdout: f.listing}, nil
	case agentwire.BuiltinOutputsFetch:
		f.fetches++
		if o.Stdout != nil {
			o.Stdout(f.archive)
			return &session.Result{}, nil
		}
		return &session.Result{Stdout: f.archive}, nil
	}
	return nil, fmt.Errorf("forged: unexpected command %+v", cmd)
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// listingOf lists each name as a regular file with content's size and sum.
func listingOf(files ...[2]string) []byte {
	var b strings.Builder
	b.WriteString("0\x00")
	for _, f := range files {
		fmt.Fprintf(&b, "%s\x00f\x001\x00%d\x00%s\x00", f[0], len(f[1]), digest(f[1]))
	}
	return []byte(b.String())
}

// entry is one forged archive entry; content is written for regular files.
type entry struct {
	h       tar.Header
	content string
}

func reg(name, content string) entry {
	return entry{h: tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(content)), Mode: 0o644}, content: content}
}

func archiveOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := e.h
		require.NoError(t, tw.WriteHeader(&h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write([]byte(e.content))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}

// A forged archive never writes outside dest, never plants a link or a
// device, and never changes a host file: each entry that is not the listed
// regular file is refused, and an archive that names what was not listed,
// or a name twice, fails the collection with dest as it was.
func TestCollectForgedArchives(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("host secret"), 0o600))
	listed := listingOf([2]string{"a.txt", "aaaa"}, [2]string{"b.txt", "bbbb"})
	cases := []struct {
		name    string
		entries []entry
		fails   string            // the collection fails with this, else:
		files   []string          // collected
		refused map[string]string // refused, by path: a part of the reason
	}{
		{name: "as listed", entries: []entry{reg("a.txt", "aaaa"), reg("b.txt", "bbbb")}, files: []string{"a.txt", "b.txt"}},
		{name: "parent escape", entries: []entry{reg("../a.txt", "aaaa")}, fails: `archive holds "../a.txt"`},
		{name: "absolute", entries: []entry{reg(secret, "aaaa")}, fails: "which was not listed"},
		{name: "repeated", entries: []entry{reg("a.txt", "aaaa"), reg("a.txt", "aaaa"), reg("b.txt", "bbbb")}, fails: `archive holds "a.txt"`},
		{name: "out of order", entries: []entry{reg("b.txt", "bbbb"), reg("a.txt", "aaaa")}, fails: `archive holds "a.txt"`},
		{name: "extra file below", entries: []entry{reg("a.txt", "aaaa"), reg("a.txt/x", "x"), reg("b.txt", "bbbb")}, fails: "not listed"},
		{name: "symlink to a host file", entries: []entry{{h: tar.Header{Typeflag: tar.TypeSymlink, Name: "a.txt", Linkname: secret}}, reg("b.txt", "bbbb")},
			files: []string{"b.txt"}, refused: map[string]string{"a.txt": "symbolic link"}},
		{name: "hard link to a host file", entries: []entry{{h: tar.Header{Typeflag: tar.TypeLink, Name: "a.txt", Linkname: secret}}, reg("b.txt", "bbbb")},
			files: []string{"b.txt"}, refused: map[string]string{"a.txt": "hard link"}},
		{name: "device", entries: []entry{{h: tar.Header{Typeflag: tar.TypeChar, Name: "a.txt", Devmajor: 1, Devminor: 3}}, reg("b.txt", "bbbb")},
			files: []string{"b.txt"}, refused: map[string]string{"a.txt": "non-regular"}},
		{name: "fifo", entries: []entry{{h: tar.Header{Typeflag: tar.TypeFifo, Name: "a.txt"}}, reg("b.txt", "bbbb")},
			files: []string{"b.txt"}, refused: map[string]string{"a.txt": "non-regular"}},
		{name: "directory", entries: []entry{{h: tar.Header{Typeflag: tar.TypeDir, Name: "a.txt/"}}, reg("b.txt", "bbbb")},
			files: []string{"b.txt"}, refused: map[string]string{"a.txt": "directory"}},
		{name: "bigger than listed", entries: []entry{reg("a.txt", "aaaa"+strings.Repeat("x", 1<<20)), reg("b.txt", "bbbb")},
			files: []string{"b.txt"}, refused: map[string]string{"a.txt": "4 bytes listed"}},
		{name: "other bytes", entries: []entry{reg("a.txt", "AAAA"), reg("b.txt", "bbbb")},
			files: []string{"b.txt"}, refused: map[string]string{"a.txt": "sha256 differs"}},
		{name: "missing", entries: []entry{reg("b.txt", "bbbb")},
			files: []string{"b.txt"}, refused: map[string]string{"a.txt": "vanished"}},
		{name: "not an archive", fails: "archive broken"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			guest := &forged{listing: listed, archive: []byte(strings.Repeat("junk", 1000))}
			if c.entries != nil {
				guest.archive = archiveOf(t, c.entries...)
			}
			dest := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dest, "keep"), []byte("host"), 0o644))
			before, outsideBefore := snapshot(t, dest), snapshot(t, outside)
			res, err := transfer.Collect(context.Background(), guest, dest, transfer.CollectOptions{Overwrite: true})
			assert.Equal(t, outsideBefore, snapshot(t, outside), "nothing outside dest changed")
			if c.fails != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, outputs.ErrUnsafeOutput)
				assert.Contains(t, err.Error(), c.fails)
				assert.Equal(t, before, snapshot(t, dest), "dest as it was")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.files, filePaths(res))
			got := refusedPaths(res)
			assert.Len(t, got, len(c.refused))
			for p, reason := range c.refused {
				assert.Contains(t, got[p], reason, p)
			}
			after := snapshot(t, dest)
			for _, f := range c.files {
				fi, err := os.Lstat(filepath.Join(dest, f))
				require.NoError(t, err)
				assert.True(t, fi.Mode().IsRegular(), f)
				delete(after, f)
			}
			assert.Equal(t, before, after, "only the collected files were added")
		})
	}
}

// --overwrite replaces a host file's name, never its bytes: another name of
// the same file keeps them; and only a regular file is replaced, never a
// directory, whose contents stay.
func TestCollectOverwriteReplacesOnlyARegularFilesName(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("host secret"), 0o600))
	dest := t.TempDir()
	require.NoError(t, os.Link(secret, filepath.Join(dest, "a.txt")))
	require.NoError(t, os.MkdirAll(filepath.Join(dest, "b.txt", "inside"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dest, "b.txt", "inside", "f"), []byte("host"), 0o644))
	guest := &forged{
		listing: listingOf([2]string{"a.txt", "aaaa"}, [2]string{"b.txt", "bbbb"}),
		archive: archiveOf(t, reg("a.txt", "aaaa"), reg("b.txt", "bbbb")),
	}
	outsideBefore := snapshot(t, outside)
	res, err := transfer.Collect(context.Background(), guest, dest, transfer.CollectOptions{Overwrite: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"a.txt"}, filePaths(res))
	assert.Contains(t, refusedPaths(res)["b.txt"], "not a regular file; not replaced")
	assert.Equal(t, outsideBefore, snapshot(t, outside), "the file's other name keeps its bytes")
	data, err := os.ReadFile(filepath.Join(dest, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "aaaa", string(data))
	data, err = os.ReadFile(filepath.Join(dest, "b.txt", "inside", "f"))
	require.NoError(t, err)
	assert.Equal(t, "host", string(data))
	names, _ := os.ReadDir(dest)
	assert.Len(t, names, 2, "no staging directory left")
}
