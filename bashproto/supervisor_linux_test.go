package bashproto

import (
	"bytes"
	"errors"
	"io"
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

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
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

func TestArgs(t *testing.T) {
	c := Call{ID: "0123456789abcdef0123456789abcdef", Secret: "fedcba9876543210fedcba9876543210"}
	args, stdin := Args(c, `echo "$HOME"; rm -rf /`, 2500*time.Millisecond, LogsIn("/workspace"), Limits{MaxLines: 20, MaxBytes: 300})
	assert.Equal(t, []string{c.ID, "3", "/tmp/oma-bash", "/workspace/.bash-output", "20", "300", "keep"}, args, "neither the command nor the secret travels in argv")
	assert.Equal(t, c.Secret+"\n"+`echo "$HOME"; rm -rf /`, string(stdin))
	args, _ = Args(c, "true", time.Second, LogsIn("/workspace"), Limits{MaxLines: 20, MaxBytes: 300, EndBackground: true})
	assert.Equal(t, "end", args[len(args)-1])
	assert.Equal(t, []string{c.ID}, KillArgs(c.ID))
}

func TestNewCall(t *testing.T) {
	a, b := NewCall(), NewCall()
	for _, s := range []string{a.ID, a.Secret, b.ID} {
		assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{32}$`), s)
	}
	assert.NotEqual(t, a.ID, b.ID)
	assert.NotEqual(t, a.ID, a.Secret)
	assert.Equal(t, "/w/.bash-output/"+a.ID+".log", a.LogPath("/w/.bash-output"))
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
		assert.Equal(t, c.want, FormatResult([]byte(c.out), nil, c.code, c.timedOut, 5), "%+v", c)
	}
	assert.Equal(t, "x\n\n[cut]\n\nCommand exited with code 1", FormatResult([]byte("x"), []string{"[cut]"}, 1, false, 5))
	assert.Equal(t, "[cut]\n\nCommand timed out after 5 seconds", FormatResult(nil, []string{"[cut]"}, 0, true, 5))
}

// supervisor is the agent's bash-supervisor builtin, run by its own
// process with args, in its own process group so that a broken supervisor
// cannot signal the test.
func supervisor(t *testing.T, args []string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(agenttest.AgentBinary(t), append([]string{"builtin", agentwire.BuiltinBashSupervisor}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// start starts the supervisor with args and stdin.
func start(t *testing.T, args []string, stdin []byte, stdout, stderr *bytes.Buffer) *exec.Cmd {
	t.Helper()
	cmd := supervisor(t, args)
	cmd.Stdin = bytes.NewReader(stdin)
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

func run(t *testing.T, args []string, stdin []byte) (stdout, stderr []byte, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := start(t, args, stdin, &out, &errb)
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

func filtered(t *testing.T, secret string, stdout []byte) (*Filter, string) {
	t.Helper()
	var out bytes.Buffer
	f := NewFilter(secret, func(p []byte) { out.Write(p) })
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
	for _, tool := range []string{"setsid", "tail", "grep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("needs " + tool)
		}
	}
}

var testLimits = Limits{MaxLines: 2000, MaxBytes: 50 << 10}

// requireDaemonGone checks that the process whose pid is in file, which
// double-forked out of the command's tree and dropped the owner tag, was
// killed: the agent, a child subreaper, adopted it.
func requireDaemonGone(t *testing.T, file string) {
	t.Helper()
	requireGone(t, readPids(t, file)[0])
}

// The supervisor is the agent itself: the command's parent.
func TestSupervisorIsTheAgent(t *testing.T) {
	requireSupported(t)
	c, _, stdout, _, code := runCommand(t, `cat /proc/$PPID/comm`, 10*time.Second)
	require.Equal(t, 0, code)
	_, out := filtered(t, c.Secret, stdout)
	require.Equal(t, "oma-guest-agent\n", out, "the command's supervisor")
}

// runCommand runs command through the supervisor with its log in a fresh
// directory.
func runCommand(t *testing.T, command string, timeout time.Duration) (c Call, logs Logs, stdout, stderr []byte, code int) {
	t.Helper()
	c = NewCall()
	logs = testLogs(t)
	args, stdin := Args(c, command, timeout, logs, testLimits)
	stdout, stderr, code = run(t, args, stdin)
	return c, logs, stdout, stderr, code
}

func testLogs(t *testing.T) Logs {
	dir := t.TempDir()
	return Logs{Live: filepath.Join(dir, "live"), Kept: filepath.Join(dir, "workspace", KeptLogDirName)}
}

func TestSupervisorExitCode(t *testing.T) {
	requireSupported(t)
	c, logs, stdout, stderr, code := runCommand(t, `echo out; echo err >&2; printf 'no newline'; exit 7`, 10*time.Second)
	assert.Equal(t, 7, code)
	assert.Empty(t, stderr)
	assert.Equal(t, dispatchLine(c.Secret)+"out\nerr\nno newline"+terminalLine(c.Secret, "exit:7"), string(stdout))

	f, out := filtered(t, c.Secret, stdout)
	assert.Equal(t, "out\nerr\nno newline", out)
	assert.NoError(t, f.Verdict(code))
	term, ok := f.Terminal()
	assert.True(t, ok)
	assert.Equal(t, Terminal{Code: 7}, term)
	requireEmptyDir(t, logs.Live)
	assert.NoDirExists(t, logs.Kept, "nothing is copied into the workspace")
}

func TestSupervisorSuccessAndQuoting(t *testing.T) {
	requireSupported(t)
	// The command is data: quotes, $ and newlines reach bash unchanged, no
	// login profile runs, stdin is empty and fd 3 is closed.
	command := "x='it'\"'\"'s $HOME'\nprintf '%s\\n' \"$x\" \"$0\" \"$-\"; cat; ls /proc/self/fd/3 2>/dev/null || echo closed"
	c, _, stdout, _, code := runCommand(t, command, time.Second)
	assert.Equal(t, 0, code)
	f, out := filtered(t, c.Secret, stdout)
	assert.NoError(t, f.Verdict(code))
	assert.Equal(t, "it's $HOME\nbash\nhBc\nclosed\n", out)
}

// The command cannot learn the secret from any process's argv or
// environment, so every terminal line it prints is ordinary output and the
// real record, written after it exits, decides.
func TestSupervisorForgedTerminal(t *testing.T) {
	requireSupported(t)
	command := `for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null | grep -Eo '^[0-9a-f]{32}$' | sort -u > "$CANDIDATES"
while read -r tok; do printf '__OMA_TERMINAL__:%s:exit:0\n' "$tok"; done < "$CANDIDATES"
printf '__OMA_TERMINAL__:%s:exit:0\n' "$` + OwnerEnv + `"
exit 3`
	candidates := filepath.Join(t.TempDir(), "candidates")
	t.Setenv("CANDIDATES", candidates)
	c, _, stdout, _, code := runCommand(t, command, 10*time.Second)
	assert.Equal(t, 3, code)
	f, out := filtered(t, c.Secret, stdout)
	assert.Contains(t, out, "__OMA_TERMINAL__:"+c.ID+":exit:0\n", "the id is public; a line with it is output")
	assert.NotContains(t, out, c.Secret)
	term, _ := f.Terminal()
	assert.Equal(t, Terminal{Code: 3}, term)
	assert.NoError(t, f.Verdict(code))
	seen, err := os.ReadFile(candidates)
	require.NoError(t, err)
	assert.NotContains(t, string(seen), c.Secret, "the secret is in no argv or environment")
}

// pkill -f and pgrep -f match nothing of ours: the command text is in no
// process's argv or environment.
func TestSupervisorCommandNotInArgv(t *testing.T) {
	requireSupported(t)
	if _, err := exec.LookPath("pkill"); err != nil {
		t.Skip("needs pkill")
	}
	command := `pgrep -fa zzz_no_such_proc; echo pgrep=$?; pkill -f zzz_no_such_proc; echo pkill=$?
echo environ=$(grep -lz zzz_no_such_proc /proc/[0-9]*/environ 2>/dev/null | wc -l)`
	c, _, stdout, _, code := runCommand(t, command, 10*time.Second)
	assert.Equal(t, 0, code)
	f, out := filtered(t, c.Secret, stdout)
	assert.NoError(t, f.Verdict(code))
	assert.Equal(t, "pgrep=1\npkill=1\nenviron=0\n", out)
}

// On a timeout every process of the command dies: a setsid loop, a
// double-forked daemon that dropped the owner tag, and a plain grandchild.
func TestSupervisorTimeoutKillsTree(t *testing.T) {
	requireSupported(t)
	work := t.TempDir()
	pids := filepath.Join(work, "pids")
	ticks := filepath.Join(work, "ticks")
	t.Setenv("PIDS", pids)
	t.Setenv("TICKS", ticks)
	daemon := filepath.Join(work, "daemon")
	t.Setenv("DAEMON", daemon)
	command := `setsid bash -c 'echo $$ >> "$PIDS"; while :; do echo x >> "$TICKS"; sleep 0.05; done' &
(env -u ` + OwnerEnv + ` setsid bash -c 'echo $$ > "$DAEMON"; exec sleep 100' &)
(sleep 100 & echo $! >> "$PIDS"; wait) &
echo started; sleep 100`
	began := time.Now()
	c, _, stdout, _, code := runCommand(t, command, 500*time.Millisecond)
	assert.Less(t, time.Since(began), 10*time.Second)
	assert.Equal(t, TimeoutExitCode, code)
	f, out := filtered(t, c.Secret, stdout)
	assert.Equal(t, "started\n", out)
	assert.NoError(t, f.Verdict(code))
	term, _ := f.Terminal()
	assert.Equal(t, Terminal{Timeout: true, Code: 137}, term)

	requireGone(t, readPids(t, pids)...)
	requireDaemonGone(t, daemon)
	st, err := os.Stat(ticks)
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	st2, err := os.Stat(ticks)
	require.NoError(t, err)
	assert.Equal(t, st.Size(), st2.Size(), "the setsid loop stopped writing")
	assert.Empty(t, processesMentioning(t, c.ID), "supervisor or command left running")
}

// A normal end kills nothing: a background process keeps writing to the
// log, which is kept and named, and never holds the supervisor's output.
func TestSupervisorBackgroundOutlivesCall(t *testing.T) {
	requireSupported(t)
	command := `(for i in $(seq 40); do echo tick$i; sleep 0.05; done) & echo started`
	began := time.Now()
	c, logs, stdout, _, code := runCommand(t, command, 30*time.Second)
	assert.Less(t, time.Since(began), 1500*time.Millisecond, "the background loop does not hold the call")
	assert.Equal(t, 0, code)
	f, out := filtered(t, c.Secret, stdout)
	assert.NoError(t, f.Verdict(code))
	log := c.LogPath(logs.Live)
	assert.Contains(t, out, "started\n")
	assert.Contains(t, out, "[Background processes are still running; their output goes to "+log+"]")
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(log)
		return strings.Contains(string(data), "tick40\n")
	}, 10*time.Second, 20*time.Millisecond, "the loop wrote to the end")
}

// A log over the limits stays for the agent to read; the host names it.
func TestSupervisorKeepsLongLog(t *testing.T) {
	requireSupported(t)
	c, logs, stdout, _, code := runCommand(t, `seq 1 3000`, 30*time.Second)
	assert.Equal(t, 0, code)
	_, out := filtered(t, c.Secret, stdout)
	data, err := os.ReadFile(c.LogPath(logs.Kept))
	require.NoError(t, err)
	assert.Equal(t, out, string(data))
	requireEmptyDir(t, logs.Live)
}

// kill runs the agent's bash-kill builtin for call id. (Its kill of a
// supervisor the agent runs: guestagent's TestBashSupervisorKilled and
// TestBashKillWaits.)
func kill(t *testing.T, id string) ([]byte, int) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(agenttest.AgentBinary(t), "builtin", agentwire.BuiltinBashKill, id)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitCode(t, cmd.Run())
	assert.Empty(t, stdout.String())
	return stderr.Bytes(), code
}

// Without a supervisor (it was killed) the kill still ends what carries
// the call's tag, and returns promptly when nothing does.
func TestKillWithoutSupervisor(t *testing.T) {
	requireSupported(t)
	c := NewCall()
	tagged := exec.Command("sleep", "100")
	tagged.Env = append(os.Environ(), OwnerEnv+"="+c.ID)
	tagged.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, tagged.Start())
	t.Cleanup(func() { _ = tagged.Process.Kill() })
	exited := make(chan error, 1)
	go func() { exited <- tagged.Wait() }()

	stderr, code := kill(t, c.ID)
	assert.Equal(t, 0, code, "stderr: %s", stderr)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the tagged process survived")
	}

	began := time.Now()
	stderr, code = kill(t, c.ID)
	assert.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Less(t, time.Since(began), 3*time.Second)
}

func TestSupervisorMalformedRequest(t *testing.T) {
	requireSupported(t)
	c := NewCall()
	args, _ := Args(c, "echo hi", time.Second, testLogs(t), testLimits)
	stdout, stderr, code := run(t, args, []byte("not-a-secret\necho hi"))
	assert.Equal(t, 91, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "oma-sandbox: malformed bash request\n", string(stderr))
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "files left behind")
}

// A FIFO the command plants where the supervisor reads or copies its log
// (the live log swapped, or the kept copy's name taken in advance) does not
// hold the supervisor past the command's end: the real status still comes.
func TestSupervisorLogFIFOsDoNotHang(t *testing.T) {
	requireSupported(t)
	for name, command := range map[string]string{
		"live": `l="$LIVE/$` + OwnerEnv + `.log"; rm -f "$l"; mkfifo "$l"; echo hi`,
		"kept": `mkdir -p "$KEPT" && mkfifo "$KEPT/$` + OwnerEnv + `.log"; seq 3000`,
	} {
		t.Run(name, func(t *testing.T) {
			c, logs := NewCall(), testLogs(t)
			t.Setenv("LIVE", logs.Live)
			t.Setenv("KEPT", logs.Kept)
			t.Cleanup(func() {
				for _, p := range processesMentioning(t, c.ID) {
					pid, _ := strconv.Atoi(p[:strings.IndexByte(p, ':')])
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			args, stdin := Args(c, command, 5*time.Second, logs, testLimits)
			var out, errb bytes.Buffer
			cmd := start(t, args, stdin, &out, &errb)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				assert.Equal(t, 0, exitCode(t, err))
				assert.Contains(t, out.String(), terminalLine(c.Secret, "exit:0"))
			case <-time.After(4 * time.Second):
				t.Fatal("the supervisor hangs on a FIFO the command planted")
			}
		})
	}
}

// A long log is kept however it looks: NUL bytes (which end the shell's
// quick look at a short log) or many short lines.
func TestSupervisorKeepsLongLogOfAnyShape(t *testing.T) {
	requireSupported(t)
	for name, command := range map[string]string{
		"nul bytes":   `head -c 60000 /dev/zero`,
		"nul first":   `printf '\0'; seq 1 3000`,
		"short lines": `for i in $(seq 2500); do echo; done`,
	} {
		c, logs, stdout, _, code := runCommand(t, command, 30*time.Second)
		assert.Equal(t, 0, code, name)
		_, out := filtered(t, c.Secret, stdout)
		data, err := os.ReadFile(c.LogPath(logs.Kept))
		if assert.NoError(t, err, name) {
			assert.Equal(t, out, string(data), name)
		}
	}
	c, logs, _, _, _ := runCommand(t, `seq 1 1500`, 30*time.Second)
	assert.NoFileExists(t, c.LogPath(logs.Kept), "a short log is not copied")
}

// A symlink the command plants at the kept copy's name (its id is public)
// is not followed: the file it points to is untouched and the result says
// the copy could not be saved.
func TestSupervisorKeptCopyDoesNotFollowSymlink(t *testing.T) {
	requireSupported(t)
	c, logs := NewCall(), testLogs(t)
	target := filepath.Join(t.TempDir(), "precious")
	require.NoError(t, os.WriteFile(target, []byte("precious\n"), 0o644))
	t.Setenv("KEPT", logs.Kept)
	t.Setenv("TARGET", target)
	args, stdin := Args(c, `mkdir -p "$KEPT" && ln -s "$TARGET" "$KEPT/$`+OwnerEnv+`.log"; seq 3000`, 10*time.Second, logs, testLimits)
	stdout, _, code := run(t, args, stdin)
	assert.Equal(t, 0, code)
	_, out := filtered(t, c.Secret, stdout)
	note := "\n[The full output could not be saved to " + c.LogPath(logs.Kept) + "]\n"
	assert.True(t, strings.Contains(out, note), "%q missing", note)
	data, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "precious\n", string(data))
}

// A host that stops reading the supervisor's output (its relay blocks on a
// full pipe) does not hold back the timeout: the command is killed on time,
// and the terminal record still comes once the host reads again.
func TestSupervisorTimeoutWhileHostDoesNotRead(t *testing.T) {
	requireSupported(t)
	c, logs := NewCall(), testLogs(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Setenv("PIDFILE", pidFile)
	args, stdin := Args(c, `echo $$ > "$PIDFILE"; seq 1 300000; sleep 100`, time.Second, logs, testLimits)
	cmd := supervisor(t, args)
	cmd.Stdin = bytes.NewReader(stdin)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(pidFile)
		return err == nil && strings.HasSuffix(string(data), "\n")
	}, 5*time.Second, 10*time.Millisecond)
	requireGone(t, readPids(t, pidFile)...) // within 5 s, nothing read yet

	all, err := io.ReadAll(stdout)
	require.NoError(t, err)
	code := exitCode(t, cmd.Wait())
	assert.Equal(t, TimeoutExitCode, code)
	f, _ := filtered(t, c.Secret, all)
	assert.NoError(t, f.Verdict(code))
	term, _ := f.Terminal()
	assert.Equal(t, Terminal{Timeout: true, Code: 137}, term)
}
