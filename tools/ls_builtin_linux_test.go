package tools

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// runWithEnv runs argv as user with env, and gives up after half a minute.
func runWithEnv(t *testing.T, user *syscall.Credential, env []string, argv ...string) builtinRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: user}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%s did not end", argv[0])
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return builtinRun{code, out.String(), errb.String()}
}

// The agent's ls builtin prints on both streams and exits with what
// testdata/ls.golden holds (recorded while it was held byte for byte to
// the ls script's find), as nobody and as root, in the C locale and in
// C.UTF-8: for every type of entry, links to each and dangling, looping or
// unsearchable ones, odd names, a directory the user may read but not
// search, search but not read, or neither, a link to a directory, a file
// and a missing path. Records come in the directory's order, which the
// golden file does not keep: they are sorted.
func TestLsBuiltinGolden(t *testing.T) {
	users := goldenUsers(t)
	root := sharedTempDir(t)
	d := filepath.Join(root, "d")
	for _, dir := range []string{"d/sub", "d/rd/in", "d/xd/in", "d/nd", "d/shut"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, dir), 0o755))
	}
	for _, f := range []string{"d/file", "d/rd/a", "d/xd/b", "d/shut/f"} {
		require.NoError(t, os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644))
	}
	// Odd names, listed in d and named in find's messages under d/rd.
	for _, name := range []string{"it's", "new\nline", "tab\there", "é", "back\\slash", "‘curly’", "\x01ctl", "\xffbad", "\xc3", "a\u2028b", "\u00a0nbsp", "q?mark", "\u0378unassigned"} {
		for _, dir := range []string{"d", "d/rd"} {
			require.NoError(t, os.WriteFile(filepath.Join(root, dir, name), []byte("x"), 0o644))
		}
	}
	require.NoError(t, syscall.Mkfifo(filepath.Join(d, "fifo"), 0o644))
	sock, err := net.Listen("unix", filepath.Join(d, "sock"))
	require.NoError(t, err)
	defer sock.Close()
	for name, to := range map[string]string{"lfile": "file", "ldir": "sub", "lfifo": "fifo", "lsock": "sock",
		"dangling": "missing", "loop": "loop", "notdir": "file/x", "shut-in": "shut/f", "rd/la": "a", "abs": "/dev/null"} {
		require.NoError(t, os.Symlink(to, filepath.Join(d, name)))
	}
	require.NoError(t, os.Symlink("d", filepath.Join(root, "linkdir")))
	giveToNobody(t, root)
	require.NoError(t, os.Chmod(filepath.Join(d, "rd"), 0o444))
	require.NoError(t, os.Chmod(filepath.Join(d, "xd"), 0o111))
	require.NoError(t, os.Chmod(filepath.Join(d, "nd"), 0o000))
	require.NoError(t, os.Chmod(filepath.Join(d, "shut"), 0o700))
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chown(filepath.Join(d, "shut"), 0, 0))
	}
	agent := agenttest.AgentBinary(t)
	targets := []string{"d", "d/", "d/rd", "d/xd", "d/nd", "d/shut", "d/sub", "linkdir", "d/ldir", "d/file", "missing", "d/loop"}
	var b strings.Builder
	for _, who := range []string{"nobody", "root"} {
		for _, locale := range []string{"", "LANG=C.UTF-8"} {
			env := []string{"PATH=/usr/bin:/bin"}
			if locale != "" {
				env = append(env, locale)
			}
			for _, target := range targets {
				args := []string{filepath.Join(root, target), "shown"}
				if strings.HasSuffix(target, "/") {
					args[0] += "/"
				}
				r := runWithEnv(t, users[who], env, append([]string{agent, "builtin", agentwire.BuiltinLs}, args...)...)
				records := strings.SplitAfter(r.stdout, "\x00")
				slices.Sort(records)
				lines := strings.Split(strings.ReplaceAll(r.stderr, root, "ROOT"), "\n")
				slices.Sort(lines)
				fmt.Fprintf(&b, "== %s as %s, %q\nexit %d\nstdout %q\nstderr %q\n", target, who, locale, r.code, strings.Join(records, ""), strings.Join(lines, "\n"))
			}
		}
	}
	golden(t, "ls", b.String())
}
