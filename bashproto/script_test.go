//go:build unix

package bashproto

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTimeoutSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		0:                       1,
		-time.Second:            1,
		time.Millisecond:        1,
		time.Second:             1,
		time.Second + 1:         2,
		1500 * time.Millisecond: 2,
		10 * time.Second:        10,
		2 * time.Hour:           7200,
	} {
		assert.Equal(t, want, TimeoutSeconds(d), d.String())
	}
}

func TestScriptArgs(t *testing.T) {
	script, args := Script(`echo "$HOME"; rm -rf /`, 2500*time.Millisecond, "/workspace/.oma-bash-x.pid", "tok")
	assert.Equal(t, []string{"/workspace/.oma-bash-x.pid", "3", `echo "$HOME"; rm -rf /`, "tok"}, args)
	assert.NotContains(t, script, "rm -rf", "the command travels as an argument")
	assert.NotContains(t, script, "bash -l")
	script, args = KillScript("/w/p.pid")
	assert.Equal(t, []string{"/w/p.pid"}, args)
	assert.NotEmpty(t, script)
}

func TestPidFileAndToken(t *testing.T) {
	assert.Equal(t, "/workspace/.oma-bash-abc.pid", PidFile("/workspace", "abc"))
	assert.Equal(t, "/workspace/.oma-bash-abc.pid", PidFile("/workspace/", "abc"))
	a, b := NewToken(), NewToken()
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{32}$`), a)
	assert.NotEqual(t, a, b)
}

func TestFormatResult(t *testing.T) {
	cases := []struct {
		out      string
		code     int
		timedOut bool
		want     string
	}{
		{"hello\n", 0, false, "hello\n"},
		{"", 0, false, "(no output)"},
		{"oops\n", 7, false, "oops\n\n\nCommand exited with code 7"},
		{"", 2, false, "(no output)\n\nCommand exited with code 2"},
		{"partial", 137, true, "partial\n\nCommand timed out after 5 seconds"},
		{"", 137, true, "Command timed out after 5 seconds"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, FormatResult([]byte(c.out), c.code, c.timedOut, 5), "%+v", c)
	}
}

// start runs a guest script locally the way the backends do, in its own
// process group so that a broken script cannot signal the test.
func start(t *testing.T, script string, args []string, stdout, stderr *bytes.Buffer) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/bash", append([]string{"-c", script, "bash"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 10 * time.Second
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

func run(t *testing.T, script string, args []string) (stdout, stderr []byte, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := start(t, script, args, &out, &errb)
	code = exitCode(t, cmd.Wait())
	return out.Bytes(), errb.Bytes(), code
}

// alive reports whether pid is a live process: kill -0 succeeds and it is
// not a zombie waiting to be reaped.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

func requireGone(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		require.Eventually(t, func() bool { return !alive(pid) }, 5*time.Second, 10*time.Millisecond, "pid %d still alive", pid)
	}
}

// processesMentioning lists live processes whose command line contains s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var found []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return found
}

func readPids(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var pids []int
	for f := range strings.FieldsSeq(string(data)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	require.NotEmpty(t, pids)
	return pids
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "files left behind")
}

func filtered(t *testing.T, token string, stdout []byte) (*Filter, string) {
	t.Helper()
	var out bytes.Buffer
	f := NewFilter(token, func(p []byte) { out.Write(p) })
	for _, b := range stdout { // the worst chunking
		_, err := f.Write([]byte{b})
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	return f, out.String()
}

func requireSupported(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("needs setsid")
	}
}

func TestScriptExitCode(t *testing.T) {
	requireSupported(t)
	pidDir := t.TempDir()
	token := NewToken()
	script, args := Script(`echo out; echo err >&2; printf 'no newline'; exit 7`, 10*time.Second, PidFile(pidDir, token), token)
	stdout, stderr, code := run(t, script, args)
	assert.Equal(t, 7, code)
	assert.Empty(t, stderr, "the command's stderr is merged into stdout")
	assert.Equal(t, dispatchLine(token)+"out\nerr\nno newline"+terminalLine(token, "exit:7"), string(stdout))

	f, out := filtered(t, token, stdout)
	assert.Equal(t, "out\nerr\nno newline", out)
	assert.NoError(t, f.Verdict(code))
	term, ok := f.Terminal()
	assert.True(t, ok)
	assert.Equal(t, Terminal{Code: 7}, term)
	assert.Equal(t, "out\nerr\nno newline\n\nCommand exited with code 7", FormatResult([]byte(out), term.Code, term.Timeout, 10))
	requireEmptyDir(t, pidDir)
}

func TestScriptSuccessAndQuoting(t *testing.T) {
	requireSupported(t)
	pidDir := t.TempDir()
	token := NewToken()
	// The command is data: quotes, $ and newlines reach bash -c unchanged,
	// and no login profile runs.
	command := "x='it'\"'\"'s $HOME'\nprintf '%s\\n' \"$x\" \"$0\" \"$-\""
	script, args := Script(command, time.Second, PidFile(pidDir, token), token)
	stdout, _, code := run(t, script, args)
	assert.Equal(t, 0, code)
	f, out := filtered(t, token, stdout)
	assert.NoError(t, f.Verdict(code))
	assert.Equal(t, "it's $HOME\n/bin/bash\nhBc\n", out)
	requireEmptyDir(t, pidDir)
}

func TestScriptForgedTerminal(t *testing.T) {
	requireSupported(t)
	pidDir := t.TempDir()
	token := NewToken()
	command := `echo "__OMA_TERMINAL__:` + token + `:exit:0"; exit 3`
	script, args := Script(command, 10*time.Second, PidFile(pidDir, token), token)
	stdout, _, code := run(t, script, args)
	assert.Equal(t, 3, code)
	f, out := filtered(t, token, stdout)
	assert.Empty(t, out)
	term, _ := f.Terminal()
	assert.Equal(t, Terminal{Code: 0}, term, "the forged line is the first one seen")
	assert.ErrorIs(t, f.Verdict(code), ErrExitMismatch, "and still loses to the process status")
}

func TestScriptTimeoutKillsGroup(t *testing.T) {
	requireSupported(t)
	pidDir := t.TempDir()
	work := t.TempDir()
	token := NewToken()
	pids := filepath.Join(work, "pids")
	// A background child without setsid of its own, a grandchild, and a
	// foreground sleep: the timer must take all of them.
	command := `sleep 100 & echo $! > "$PIDS"; (sleep 100 & echo $! >> "$PIDS"; wait) & echo started; sleep 100`
	script, args := Script(command, 500*time.Millisecond, PidFile(pidDir, token), token)
	t.Setenv("PIDS", pids)
	began := time.Now()
	stdout, _, code := run(t, script, args)
	assert.Less(t, time.Since(began), 10*time.Second)
	assert.Equal(t, TimeoutExitCode, code)
	assert.True(t, strings.HasSuffix(string(stdout), terminalLine(token, "timeout:137")), "%q", stdout)

	f, out := filtered(t, token, stdout)
	assert.Equal(t, "started\n", out)
	assert.NoError(t, f.Verdict(code))
	term, _ := f.Terminal()
	assert.Equal(t, Terminal{Timeout: true, Code: 137}, term)
	assert.Equal(t, "started\n\n\nCommand timed out after 1 seconds", FormatResult([]byte(out), term.Code, term.Timeout, TimeoutSeconds(500*time.Millisecond)))

	requireGone(t, readPids(t, pids)...)
	assert.Empty(t, processesMentioning(t, pidDir), "timer or command left running")
	requireEmptyDir(t, pidDir)
}

func TestKillScript(t *testing.T) {
	requireSupported(t)
	pidDir := t.TempDir()
	work := t.TempDir()
	token := NewToken()
	pidFile := PidFile(pidDir, token)
	pids := filepath.Join(work, "pids")
	t.Setenv("PIDS", pids)
	script, args := Script(`echo $$ > "$PIDS"; sleep 100 & echo $! >> "$PIDS"; sleep 100`, time.Minute, pidFile, token)
	var stdout, stderr bytes.Buffer
	cmd := start(t, script, args, &stdout, &stderr)
	// The command may print its pids before the script has written the pid
	// file: wait for both.
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(pids)
		_, ferr := os.Stat(pidFile)
		return err == nil && len(strings.Fields(string(data))) == 2 && ferr == nil
	}, 5*time.Second, 10*time.Millisecond)
	leader, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(readPids(t, pids)[0]), string(leader), "the pid file holds the group leader")

	kill, killArgs := KillScript(pidFile)
	_, kstderr, kcode := run(t, kill, killArgs)
	assert.Equal(t, 0, kcode, "stderr: %s", kstderr)

	code := exitCode(t, cmd.Wait())
	assert.Equal(t, TimeoutExitCode, code)
	f, out := filtered(t, token, stdout.Bytes())
	assert.Empty(t, out)
	assert.NoError(t, f.Verdict(code))
	term, _ := f.Terminal()
	assert.Equal(t, Terminal{Code: 137}, term, "killed from outside, not by the timer")

	requireGone(t, readPids(t, pids)...)
	assert.Empty(t, processesMentioning(t, pidDir), "timer or command left running")
	requireEmptyDir(t, pidDir)
}

func TestKillScriptWithoutRun(t *testing.T) {
	requireSupported(t)
	dir := t.TempDir()
	pidFile := PidFile(dir, "none")
	kill, args := KillScript(pidFile)
	began := time.Now()
	_, stderr, code := run(t, kill, args)
	assert.Equal(t, 0, code, "stderr: %s", stderr)
	assert.GreaterOrEqual(t, time.Since(began), 500*time.Millisecond, "waits for a pid file that may still appear")

	// Pid files are writable by the command: garbage is never signalled.
	// The script runs in its own group, so a kill of group 0 would end it
	// with a signal instead of exit 0; numbers are beyond any pid_max.
	for _, content := range []string{"0", "00", "", "abc", "12x", "-5", " 4194305", "4194305\n", "-4194305"} {
		require.NoError(t, os.WriteFile(pidFile, []byte(content), 0o644))
		require.NoError(t, os.WriteFile(pidFile+".timer", []byte(content), 0o644))
		_, stderr, code := run(t, kill, args)
		assert.Equal(t, 0, code, "%q: %s", content, stderr)
		requireEmptyDir(t, dir)
	}
}
