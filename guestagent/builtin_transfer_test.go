//go:build linux

package guestagent

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// runHere runs builtin name as this process's user and returns its status,
// stdout and stderr.
func runHere(t *testing.T, name string, stdin io.Reader, args ...string) (int, []byte, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := RunBuiltin(name, args, stdin, &out, &errb)
	require.NoError(t, err)
	return code, out.Bytes(), errb.String()
}

// archiveEntries reads a tar archive into "name type [linkname|content]"
// lines.
func archiveEntries(t *testing.T, b []byte) []string {
	t.Helper()
	var got []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		require.NoError(t, err)
		body, err := io.ReadAll(tr)
		require.NoError(t, err)
		got = append(got, h.Name+" "+string(h.Typeflag)+" "+h.Linkname+string(body))
	}
}

// The fetch reads every entry as it is, through no link: a parent that
// became a link, a link, a second name of a file already sent, a
// directory, a pipe each arrive as what they are (or not at all), and only
// regular files carry bytes.
func TestOutputsFetchFollowsNoLink(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	write := func(rel, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644))
	}
	write("a/file", "kept")
	write("h1", "linked")
	require.NoError(t, os.Link(filepath.Join(root, "h1"), filepath.Join(root, "h2")))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "f"), []byte("secret"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "p")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "f"), filepath.Join(root, "l")))
	require.NoError(t, os.Mkdir(filepath.Join(root, "d"), 0o755))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))

	names := strings.Join([]string{"p/f", "l", "h1", "h2", "d", "fifo", "gone", "a/file"}, "\x00") + "\x00"
	code, out, stderr := runHere(t, agentwire.BuiltinOutputsFetch, strings.NewReader(names), root)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, []string{
		"l 2 " + filepath.Join(outside, "f"),
		"h1 0 linked",
		"h2 1 h1",
		"d/ 5 ",
		"fifo 6 ",
		"a/file 0 kept",
	}, archiveEntries(t, out), "p/f lies behind a link and gone is gone: neither arrives")
}

func TestOutputsFetchRefusesBadInput(t *testing.T) {
	root := t.TempDir()
	for _, names := range []string{"../x\x00", "a//b\x00", "/etc/passwd\x00", "no-nul"} {
		code, out, stderr := runHere(t, agentwire.BuiltinOutputsFetch, strings.NewReader(names), root)
		assert.NotEqual(t, 0, code, "%q", names)
		assert.NotEmpty(t, stderr, "%q", names)
		assert.Empty(t, archiveEntries(t, out), "%q", names)
	}
	code, _, stderr := runHere(t, agentwire.BuiltinOutputsFetch, strings.NewReader(""), filepath.Join(root, "missing"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "cannot enter outputs root")
}

// tarOf builds an archive of the given entries: a name ending in "/" is a
// directory, one with "->" a symbolic link, any other a file.
func tarOf(t *testing.T, entries ...[2]string) io.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e[0], Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e[1]))}
		switch {
		case strings.HasSuffix(e[0], "/"):
			h.Typeflag, h.Size = tar.TypeDir, 0
		case strings.HasPrefix(e[1], "->"):
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, e[1][2:], 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write([]byte(e[1]))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return &b
}

// Extraction follows no link below the root: a link where a directory
// belongs is replaced by the directory, a link or file where a file
// belongs is replaced by the file, and nothing is written where they
// pointed. Modes are 755 and 444.
func TestExtractFollowsNoLink(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "victim"), []byte("host file"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "x")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "victim"), filepath.Join(root, "f")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "old"), []byte("old bytes"), 0o644))

	archive := tarOf(t, [2]string{"x/", ""}, [2]string{"x/a", "in x"}, [2]string{"f", "new f"}, [2]string{"old", "new"}, [2]string{"y/z/deep", "made"})
	code, _, stderr := runHere(t, agentwire.BuiltinExtract, archive, "uploads", root)
	require.Equal(t, 0, code, stderr)

	victim, err := os.ReadFile(filepath.Join(outside, "victim"))
	require.NoError(t, err)
	assert.Equal(t, "host file", string(victim))
	left, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Len(t, left, 1, "nothing written through the link to a directory")
	for rel, want := range map[string]string{"x/a": "in x", "f": "new f", "old": "new", "y/z/deep": "made"} {
		fi, err := os.Lstat(filepath.Join(root, rel))
		require.NoError(t, err, rel)
		assert.Equal(t, os.FileMode(0o444), fi.Mode(), rel)
		b, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		assert.Equal(t, want, string(b), rel)
	}
	for _, dir := range []string{"x", "y", "y/z"} {
		fi, err := os.Lstat(filepath.Join(root, dir))
		require.NoError(t, err)
		assert.Equal(t, os.ModeDir|0o755, fi.Mode(), dir)
	}
	names, err := os.ReadDir(root)
	require.NoError(t, err)
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	assert.Equal(t, []string{"f", "old", "x", "y"}, got, "no temporary file is left")
}

// What the host never sends is refused, and an uploads root that others
// could have prepared is not extracted into.
func TestExtractRefuses(t *testing.T) {
	outside := t.TempDir()
	cases := []struct {
		name    string
		archive func() io.Reader
		want    string
	}{
		{"parent escape", func() io.Reader { return tarOf(t, [2]string{"../escaped", "x"}) }, "not a plain relative path"},
		{"absolute", func() io.Reader { return tarOf(t, [2]string{filepath.Join(outside, "abs"), "x"}) }, "not a plain relative path"},
		{"a link", func() io.Reader { return tarOf(t, [2]string{"l", "->" + outside}) }, "only directories and regular files"},
		{"not a tar", func() io.Reader { return strings.NewReader(strings.Repeat("junk", 200)) }, "reading the archive"},
	}
	for _, c := range cases {
		root := t.TempDir()
		code, _, stderr := runHere(t, agentwire.BuiltinExtract, c.archive(), "uploads", root)
		assert.Equal(t, 1, code, c.name)
		assert.Contains(t, stderr, c.want, c.name)
		left, err := os.ReadDir(outside)
		require.NoError(t, err)
		assert.Empty(t, left, c.name)
	}

	root := t.TempDir()
	require.NoError(t, os.Chmod(root, 0o777))
	code, _, stderr := runHere(t, agentwire.BuiltinExtract, tarOf(t, [2]string{"a", "x"}), "uploads", root)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "not owned by")
	assert.NoFileExists(t, filepath.Join(root, "a"))

	code, _, stderr = runHere(t, agentwire.BuiltinExtract, tarOf(t), "other", root)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "unknown kind")
}

// Skills are made executable below a scripts directory, and their root is
// made when missing.
func TestExtractSkills(t *testing.T) {
	root := filepath.Join(t.TempDir(), "skills")
	code, _, stderr := runHere(t, agentwire.BuiltinExtract, tarOf(t, [2]string{"pdf/SKILL.md", "# pdf"}, [2]string{"pdf/scripts/run.sh", "#!/bin/sh\n"}), "skills", root)
	require.Equal(t, 0, code, stderr)
	for rel, mode := range map[string]os.FileMode{"pdf/SKILL.md": 0o444, "pdf/scripts/run.sh": 0o555} {
		fi, err := os.Stat(filepath.Join(root, rel))
		require.NoError(t, err)
		assert.Equal(t, mode, fi.Mode(), rel)
	}
}

// Files land in their own directories in whatever order the archive
// names them, a directory's files together or not, each directory made
// 755 once reached.
func TestExtractInAnyOrder(t *testing.T) {
	root := filepath.Join(t.TempDir(), "skills")
	files := [][2]string{{"a/1", "a1"}, {"b/1", "b1"}, {"a/2", "a2"}, {"top", "t"}, {"a/b/3", "ab3"}, {"a/4", "a4"}, {"b/c/d/5", "bcd5"}}
	code, _, stderr := runHere(t, agentwire.BuiltinExtract, tarOf(t, files...), "skills", root)
	require.Equal(t, 0, code, stderr)
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(root, f[0]))
		require.NoError(t, err)
		assert.Equal(t, f[1], string(got), f[0])
	}
	for _, d := range []string{"a", "b", "a/b", "b/c", "b/c/d"} {
		fi, err := os.Lstat(filepath.Join(root, d))
		require.NoError(t, err)
		assert.Equal(t, os.ModeDir|0o755, fi.Mode(), d)
	}
	entries, err := os.ReadDir(filepath.Join(root, "a"))
	require.NoError(t, err)
	assert.Len(t, entries, 4, "a holds 1, 2, 4 and b, no temporary file")
}

// The listing hashes a file no further than its listed size and one byte:
// a file that grew since it was listed costs no more, and its digest
// (of the first size+1 bytes) no longer matches what a fetch sends.
func TestListingHashesNoFurtherThanItsSize(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "f"), []byte("abcdef"), 0o644))
	fd, err := openNoFollow(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY)
	require.NoError(t, err)
	defer unix.Close(fd)
	l := &listing{c: &builtinCall{Killed: make(chan struct{})}}
	entries := []listedEntry{{path: "f", typ: 'f', links: 1, size: 2, fetch: true}, {path: "f", typ: 'f', links: 1, size: 2}}
	l.hash(fd, entries)
	sum := sha256.Sum256([]byte("abc"))
	assert.Equal(t, hex.EncodeToString(sum[:]), entries[0].sum)
	assert.Empty(t, entries[1].sum, "a refused entry is not hashed")
}
