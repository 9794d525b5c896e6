package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runWriteScript runs writeScript with bash and PATH, as the guest would.
func runWriteScript(t *testing.T, path, target, want, ws, content string) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/bash", "-c", writeScript, "bash", target, want, ws, "shown")
	cmd.Env = []string{"PATH=" + path}
	cmd.Stdin = strings.NewReader(content)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errb, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return errb.String(), code
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

// writeScript's perl pass and its coreutils fallback leave the same files,
// exit with the same code and say the same thing for every shape of
// target: new, existing with an odd mode, missing parents, a parent that
// is a file or a symbolic link loop, links inside and outside the
// workspace, a directory, an edit with the right or a wrong digest, and
// directories no file can be made in.
func TestWriteScriptPerlMatchesCoreutils(t *testing.T) {
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Skip("needs perl for the fast path")
	}
	withPerl, withoutPerl := t.TempDir(), t.TempDir()
	for _, tool := range []string{"readlink", "mkdir", "mktemp", "cat", "chmod", "flock", "sha256sum", "mv", "rm", "rmdir"} {
		p, err := exec.LookPath(tool)
		require.NoError(t, err)
		for _, dir := range []string{withPerl, withoutPerl} {
			require.NoError(t, os.Symlink(p, filepath.Join(dir, tool)))
		}
	}
	require.NoError(t, os.Symlink(perl, filepath.Join(withPerl, "perl")))

	old := "old content\n"
	sum := sha256.Sum256([]byte(old))
	right := hex.EncodeToString(sum[:])
	wrong := strings.Repeat("0", 64)
	setup := func(t *testing.T, root string) {
		ws := filepath.Join(root, "ws")
		require.NoError(t, os.MkdirAll(filepath.Join(ws, "sub", "in"), 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(root, "out"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(ws, "old.txt"), []byte(old), 0o751))
		require.NoError(t, os.WriteFile(filepath.Join(ws, "file"), []byte(old), 0o644))
		require.NoError(t, os.Symlink("sub/in/old.txt", filepath.Join(ws, "inside")))
		require.NoError(t, os.Symlink(filepath.Join(root, "out", "x.txt"), filepath.Join(ws, "outside")))
		require.NoError(t, os.Symlink("loop", filepath.Join(ws, "loop")))
		require.NoError(t, os.WriteFile(filepath.Join(ws, "sub", "in", "old.txt"), []byte(old), 0o600))
		require.NoError(t, os.Mkdir(filepath.Join(ws, "locked"), 0o500))
	}
	cases := []struct{ name, target, want string }{
		{"new file", "new.txt", ""},
		{"existing odd mode", "old.txt", ""},
		{"missing parents", "x/y/z.txt", ""},
		{"parent is a file", "file/x.txt", ""},
		{"grandparent is a file", "file/x/y.txt", ""},
		{"parent is a link loop", "loop/x.txt", ""},
		{"link inside", "inside", ""},
		{"link outside", "outside", ""},
		{"parent link outside", "outside/../x.txt", ""},
		{"directory", "sub", ""},
		{"edit right digest", "old.txt", right},
		{"edit wrong digest", "old.txt", wrong},
		{"edit missing file", "gone/new.txt", right},
		{"unwritable dir", "locked/x.txt", ""},
		{"proc", "/proc/oma-write-test.txt", ""},
		{"proc dir", "/proc/oma-write-test/x.txt", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var results [2]string
			for i, path := range []string{withPerl, withoutPerl} {
				root := t.TempDir()
				setup(t, root)
				ws := filepath.Join(root, "ws")
				target := c.target
				if !filepath.IsAbs(target) {
					target = filepath.Join(ws, target)
				} else {
					ws = "/"
				}
				msg, code := runWriteScript(t, path, target, c.want, ws, "new content\n")
				results[i] = fmt.Sprintf("exit %d\n%s\n%s", code, strings.ReplaceAll(msg, root, "ROOT"), strings.Join(treeState(t, root), "\n"))
			}
			assert.Equal(t, results[1], results[0], "perl (first) and coreutils (second) differ")
		})
	}
}
