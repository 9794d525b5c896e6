//go:build unix

package tools

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// nobody is the user the script tests run as when they run as root, so that
// a file's permissions mean something.
const nobody = 65534

// scriptPaths gives two PATH directories holding the tools the write and cat
// scripts' coreutils fallback runs; only the first also holds perl.
func scriptPaths(t *testing.T) (withPerl, withoutPerl string) {
	t.Helper()
	perl, err := exec.LookPath("perl")
	if err != nil {
		t.Skip("needs perl for the fast path")
	}
	withPerl, withoutPerl = sharedTempDir(t), sharedTempDir(t)
	for _, tool := range []string{"readlink", "timeout", "mkdir", "mktemp", "cat", "chmod", "flock", "sha256sum", "mv", "rm", "rmdir", "head", "tail", "stat"} {
		p, err := exec.LookPath(tool)
		require.NoError(t, err)
		for _, dir := range []string{withPerl, withoutPerl} {
			require.NoError(t, os.Symlink(p, filepath.Join(dir, tool)))
		}
	}
	require.NoError(t, os.Symlink(perl, filepath.Join(withPerl, "perl")))
	return withPerl, withoutPerl
}

// sharedTempDir is a t.TempDir that nobody can enter.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// giveToNobody makes nobody own every entry under root, when the test is
// root and will run the scripts as nobody.
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

// scriptRun is what a guest script left: its exit code and its two streams.
type scriptRun struct {
	code           int
	stdout, stderr string
}

// runScript runs a guest script with bash and PATH, as the guest would (as
// nobody when the test is root), and gives up after half a minute: a script
// that blocks fails the test instead of hanging it.
func runScript(t *testing.T, script, path, stdin string, args ...string) scriptRun {
	t.Helper()
	return runScriptAs(t, scriptUser(), script, path, stdin, args...)
}

// scriptUser is the user the script tests run a script or builtin as:
// nobody when the test is root, else the test's own user (nil).
func scriptUser() *syscall.Credential {
	if os.Geteuid() == 0 {
		return &syscall.Credential{Uid: nobody, Gid: nobody}
	}
	return nil
}

// scriptUsers are the users the parity tests compare a script's passes
// and its builtin as: nobody and root when the test is root.
func scriptUsers() map[string]*syscall.Credential {
	if os.Geteuid() == 0 {
		return map[string]*syscall.Credential{"nobody": scriptUser(), "root": {}}
	}
	return map[string]*syscall.Credential{"self": nil}
}

// runScriptAs is runScript as user (nil: the test's own).
func runScriptAs(t *testing.T, user *syscall.Credential, script, path, stdin string, args ...string) scriptRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/bash", append([]string{"-c", script, "bash"}, args...)...)
	cmd.Env = []string{"PATH=" + path}
	cmd.Stdin = strings.NewReader(stdin)
	// Its own process group, killed whole: a script that does not end
	// leaves no child behind either.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr.Credential = user
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "the script did not end")
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return scriptRun{code, out.String(), errb.String()}
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

// scriptRunners run a guest script's three ways, each given stdin and
// args: its perl pass, its coreutils fallback, and, where the guest agent
// runs, the agent's builtin that stands for it.
func scriptRunners(t *testing.T, user *syscall.Credential, script, builtin, withPerl, withoutPerl string) []func(stdin string, args ...string) scriptRun {
	runners := []func(string, ...string) scriptRun{
		func(stdin string, args ...string) scriptRun {
			return runScriptAs(t, user, script, withPerl, stdin, args...)
		},
		func(stdin string, args ...string) scriptRun {
			return runScriptAs(t, user, script, withoutPerl, stdin, args...)
		},
	}
	if agentRuns {
		runners = append(runners, func(stdin string, args ...string) scriptRun { return runBuiltinAs(t, user, builtin, stdin, args...) })
	}
	return runners
}

const oldContent = "old content\n"

// scriptTree lays out a workspace ws under root with the targets the
// equivalence tests try: files with odd modes, an unreadable file, a FIFO,
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

// writeScript's perl pass and its coreutils fallback leave the same files,
// exit with the same code and say the same thing on the same stream for
// every shape of target: new, existing with an odd mode, missing parents, a
// parent that is a file or a symbolic link loop, links inside and outside
// the workspace, dangling, looping or growing links, a long chain, a FIFO,
// a directory, an edit whose original bytes match, differ or were cut
// short, and directories no file can be made in. The agent's write builtin
// does the same, each run as nobody and as root when the test is root.
func TestWriteScriptPerlMatchesCoreutils(t *testing.T) {
	withPerl, withoutPerl := scriptPaths(t)
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
		{"edit fifo", "fifo", old, oldContent},
		{"edit link to a fifo", "fifolink", old, oldContent},
		{"edit unreadable file", "secret", old, oldContent},
		{"unwritable dir", "locked/x.txt", "", ""},
		{"proc", "/proc/oma-write-test.txt", "", ""},
		{"proc dir", "/proc/oma-write-test/x.txt", "", ""},
	}
	for _, c := range cases {
		for who, user := range scriptUsers() {
			t.Run(c.name+"/"+who, func(t *testing.T) {
				var results []string
				for _, run := range scriptRunners(t, user, writeScript, agentwire.BuiltinWrite, withPerl, withoutPerl) {
					root := sharedTempDir(t)
					scriptTree(t, root)
					ws := filepath.Join(root, "ws")
					target := c.target
					if !filepath.IsAbs(target) {
						target = filepath.Join(ws, target)
					} else {
						ws = "/"
					}
					r := run(c.original+"new content\n", target, c.old, ws, "shown")
					results = append(results, fmt.Sprintf("exit %d\nstdout %q\nstderr %q\n%s", r.code, r.stdout, strings.ReplaceAll(r.stderr, root, "ROOT"),
						strings.Join(treeState(t, root), "\n")))
				}
				assertRunsAgree(t, results)
			})
		}
	}
}

// assertRunsAgree holds the runs of scriptRunners to one result: perl's,
// coreutils' and the builtin's.
func assertRunsAgree[R any](t *testing.T, results []R) {
	t.Helper()
	assert.Equal(t, results[1], results[0], "perl (first) and coreutils (second) differ")
	if len(results) > 2 {
		assert.Equal(t, results[0], results[2], "perl (first) and the agent's builtin (second) differ")
	}
}

// catScript's perl pass, its coreutils fallback and the agent's cat builtin
// print the same bytes on the same streams and exit with the same code for
// every shape of target, as nobody and as root when the test is root.
func TestCatScriptPerlMatchesCoreutils(t *testing.T) {
	withPerl, withoutPerl := scriptPaths(t)
	root := sharedTempDir(t)
	scriptTree(t, root)
	ws := filepath.Join(root, "ws")
	for _, target := range []string{"old.txt", "empty", "inside", "outside", "dangling", "loop",
		"loop/x", "grow", "m/d0", "m/dots", "m/e0", "m/a/b/back/f", "m/a/b/out", "fifo", "fifolink", "sub", "m/slash",
		"secret", "missing/x", "file/x"} {
		for who, user := range scriptUsers() {
			t.Run(target+"/"+who, func(t *testing.T) {
				var results []scriptRun
				for _, run := range scriptRunners(t, user, catScript, agentwire.BuiltinCat, withPerl, withoutPerl) {
					results = append(results, run("", filepath.Join(ws, target), ws, "shown"))
				}
				assertRunsAgree(t, results)
			})
		}
	}
}
