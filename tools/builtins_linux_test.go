package tools

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// nobody is the user the builtin tests run as when they run as root, so
// that a file's permissions mean something.
const nobody = 65534

// sharedTempDir is a t.TempDir that nobody can enter.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// giveToNobody makes nobody own every entry under root, when the test is
// root and will run the builtins as nobody.
func giveToNobody(t *testing.T, root string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	require.NoError(t, filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}))
}

// builtinRun is what a builtin left: its exit code and its two streams.
type builtinRun struct {
	code           int
	stdout, stderr string
}

// builtinUser is the user the tests run a builtin as: nobody when the
// test is root, else the test's own user (nil).
func builtinUser() *syscall.Credential {
	if os.Geteuid() == 0 {
		return &syscall.Credential{Uid: nobody, Gid: nobody}
	}
	return nil
}

// goldenUsers are the users the golden tests run a builtin as, by the
// name their golden files give them: root and nobody, so the tests need
// root.
func goldenUsers(t *testing.T) map[string]*syscall.Credential {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the builtin as root and as nobody")
	}
	return map[string]*syscall.Credential{"nobody": builtinUser(), "root": {}}
}

// update rewrites the golden files from what the builtins give now.
var update = flag.Bool("update", false, "rewrite the builtins' golden files in testdata from their runs")

// golden holds got, the text of all the cases of one test, to
// testdata/NAME.golden.
func golden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(file, []byte(got), 0o644))
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, string(want), got)
}

// treeState describes every entry under root: kind, mode, content or link
// target, so that two runs can be compared entry by entry.
func treeState(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		require.NoError(t, err)
		desc := fmt.Sprintf("%s %v", rel, info.Mode())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			require.NoError(t, err)
			desc += " -> " + strings.ReplaceAll(l, root, "ROOT")
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			desc += " " + string(b)
		}
		out = append(out, desc)
		return nil
	}))
	sort.Strings(out)
	return out
}

const oldContent = "old content\n"

// scriptTree lays out a workspace ws under root with the targets the
// write and cat tests try: files with odd modes, an unreadable file, a FIFO,
// links inside, outside, dangling and looping, a link whose target grows
// under itself, a chain of links longer than the kernel follows, a
// directory nobody may write in, and the link maze of linkMaze under ws/m.
func scriptTree(t *testing.T, root string) {
	ws := filepath.Join(root, "ws")
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "sub", "in"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "out"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "old.txt"), []byte(oldContent), 0o751))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "file"), []byte(oldContent), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "empty"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "secret"), []byte(oldContent), 0o000))
	require.NoError(t, os.WriteFile(filepath.Join(root, "out", "x.txt"), []byte("outside\n"), 0o644))
	require.NoError(t, syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	require.NoError(t, os.Symlink("sub/in/old.txt", filepath.Join(ws, "inside")))
	require.NoError(t, os.Symlink(filepath.Join(root, "out", "x.txt"), filepath.Join(ws, "outside")))
	require.NoError(t, os.Symlink("missing/new.txt", filepath.Join(ws, "dangling")))
	require.NoError(t, os.Symlink("loop", filepath.Join(ws, "loop")))
	require.NoError(t, os.Symlink("grow/x", filepath.Join(ws, "grow")))
	require.NoError(t, os.Symlink("fifo", filepath.Join(ws, "fifolink")))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "sub", "in", "old.txt"), []byte(oldContent), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "locked"), 0o500))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "m"), 0o755))
	linkMaze(t, filepath.Join(ws, "m"))
	giveToNobody(t, root)
}

// treeChanges says what changed under root between two treeStates.
func treeChanges(before, after []string) string {
	var out []string
	for _, e := range after {
		if !slices.Contains(before, e) {
			out = append(out, "+ "+e)
		}
	}
	for _, e := range before {
		if !slices.Contains(after, e) {
			out = append(out, "- "+e)
		}
	}
	return strings.Join(out, "\n")
}

// The agent's write builtin leaves the files, exits with the code and says
// on each stream what testdata/write.golden holds (recorded while it was
// held byte for byte to the write script's perl pass and coreutils
// fallback), as nobody and as root, for every shape of target: new,
// existing with an odd mode, missing parents, a parent that is a file or a
// symbolic link loop, links inside and outside the workspace, dangling,
// looping or growing links, a long chain, a FIFO, a directory, an edit
// whose original bytes match, differ or were cut short, and directories no
// file can be made in. A failure leaves nothing behind.
func TestWriteBuiltinGolden(t *testing.T) {
	old := strconv.Itoa(len(oldContent))
	cases := []struct{ name, target, old, original string }{
		{"new file", "new.txt", "", ""},
		{"existing odd mode", "old.txt", "", ""},
		{"missing parents", "x/y/z.txt", "", ""},
		{"parent is a file", "file/x.txt", "", ""},
		{"grandparent is a file", "file/x/y.txt", "", ""},
		{"parent is a link loop", "loop/x.txt", "", ""},
		{"link inside", "inside", "", ""},
		{"link outside", "outside", "", ""},
		{"parent link outside", "outside/../x.txt", "", ""},
		{"dangling link", "dangling", "", ""},
		{"link loop", "loop", "", ""},
		{"growing link", "grow", "", ""},
		{"long chain", "m/d0", "", ""},
		{"chain into a loop", "m/e0/x", "", ""},
		{"maze up and back", "m/a/b/back/f", "", ""},
		{"maze out", "m/a/b/out/x", "", ""},
		{"fifo", "fifo", "", ""},
		{"directory", "sub", "", ""},
		{"link to a directory", "m/slash", "", ""},
		{"unreadable file", "secret", "", ""},
		{"edit", "old.txt", old, oldContent},
		{"edit through a link", "inside", old, oldContent},
		{"edit changed", "old.txt", old, "new content\n"},
		{"edit grew", "old.txt", strconv.Itoa(len(oldContent) - 1), oldContent[1:]},
		{"edit shrank", "old.txt", strconv.Itoa(len(oldContent) + 1), oldContent + "x"},
		{"edit of an empty file", "empty", "0", ""},
		{"edit cut short", "old.txt", "100", oldContent},
		{"edit missing file", "gone/new.txt", old, oldContent},
		{"edit missing parents", "gone/deeper/new.txt", old, oldContent},
		{"edit fifo", "fifo", old, oldContent},
		{"edit link to a fifo", "fifolink", old, oldContent},
		{"edit unreadable file", "secret", old, oldContent},
		{"unwritable dir", "locked/x.txt", "", ""},
		{"proc", "/proc/oma-write-test.txt", "", ""},
		{"proc dir", "/proc/oma-write-test/x.txt", "", ""},
	}
	users := goldenUsers(t)
	var b strings.Builder
	for _, c := range cases {
		for _, who := range []string{"nobody", "root"} {
			root := sharedTempDir(t)
			scriptTree(t, root)
			ws := filepath.Join(root, "ws")
			target := c.target
			if !filepath.IsAbs(target) {
				target = filepath.Join(ws, target)
			} else {
				ws = "/"
			}
			before := treeState(t, root)
			r := runBuiltinAs(t, users[who], agentwire.BuiltinWrite, c.original+"new content\n", target, c.old, ws, "shown")
			fmt.Fprintf(&b, "== %s as %s\nexit %d\nstdout %q\nstderr %q\n%s\n", c.name, who, r.code, r.stdout,
				strings.ReplaceAll(r.stderr, root, "ROOT"), treeChanges(before, treeState(t, root)))
		}
	}
	golden(t, "write", b.String())
}

// The agent's cat builtin prints the bytes on the streams and exits with
// the code testdata/cat.golden holds (recorded while it was held byte for
// byte to the cat script's perl pass and coreutils fallback) for every
// shape of target, as nobody and as root.
func TestCatBuiltinGolden(t *testing.T) {
	users := goldenUsers(t)
	root := sharedTempDir(t)
	scriptTree(t, root)
	ws := filepath.Join(root, "ws")
	var b strings.Builder
	for _, target := range []string{"old.txt", "empty", "inside", "outside", "dangling", "loop",
		"loop/x", "grow", "m/d0", "m/dots", "m/e0", "m/a/b/back/f", "m/a/b/out", "fifo", "fifolink", "sub", "m/slash",
		"secret", "missing/x", "file/x"} {
		for _, who := range []string{"nobody", "root"} {
			r := runBuiltinAs(t, users[who], agentwire.BuiltinCat, "", filepath.Join(ws, target), ws, "shown")
			fmt.Fprintf(&b, "== %s as %s\nexit %d\nstdout %q\nstderr %q\n", target, who, r.code, r.stdout, strings.ReplaceAll(r.stderr, root, "ROOT"))
		}
	}
	golden(t, "cat", b.String())
}
