package bashproto

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// supervisorRun is what one supervisor did for a case: its output and
// status, and the files it left.
type supervisorRun struct {
	stdout, stderr string
	code           int
	files          []string // path (relative to the case's root), mode, owner, content
}

// runSupervisor runs Script's supervisor, the perl one or the agent's
// builtin, for call c in root (its logs under root, its workdir root/work)
// as cred (nil: this process's user).
func runSupervisor(t *testing.T, builtin bool, c Call, root string, cred *syscall.Credential, command string, timeout time.Duration, stdin []byte, wait time.Duration, end bool) supervisorRun {
	t.Helper()
	logs := Logs{Live: filepath.Join(root, "live"), Kept: filepath.Join(root, "work", KeptLogDirName)}
	script, args, in := Script(c, command, timeout, logs, Limits{MaxLines: 2000, MaxBytes: 50 << 10, EndBackground: end})
	if stdin != nil {
		in = stdin
	}
	cmd := exec.Command("/bin/bash", append([]string{"-c", script, "bash"}, args...)...)
	if builtin {
		cmd = exec.Command(agenttest.AgentBinary(t), append([]string{"builtin", agentwire.BuiltinBashSupervisor}, args...)...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	cmd.Dir = filepath.Join(root, "work")
	cmd.Env = append(os.Environ(), "ROOT="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	cmd.WaitDelay = 10 * time.Second
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	code := exitCode(t, cmd.Wait())
	time.Sleep(wait) // what background processes do after the call
	run := supervisorRun{stdout: stdout.String(), stderr: stderr.String(), code: code}
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		var st syscall.Stat_t
		require.NoError(t, syscall.Lstat(path, &st))
		rel, _ := filepath.Rel(root, path)
		entry := fmt.Sprintf("%s %o %d:%d", rel, st.Mode, st.Uid, st.Gid)
		if d.Type().IsRegular() {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			entry += " " + string(data)
		}
		run.files = append(run.files, entry)
		return nil
	}))
	sort.Strings(run.files)
	return run
}

// parityRoot is a fresh directory any user may use (t.TempDir's parent is
// private to root).
func parityRoot(t *testing.T) string {
	root, err := os.MkdirTemp("", "bsup-parity-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o777))
	return root
}

// resetRoot empties root and gives it the workdir and a file to protect.
func resetRoot(t *testing.T, root string) {
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, os.RemoveAll(filepath.Join(root, e.Name())))
	}
	work := filepath.Join(root, "work")
	require.NoError(t, os.Mkdir(work, 0o777))
	require.NoError(t, os.Chmod(work, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(root, "precious"), []byte("precious\n"), 0o644))
}

// The agent's builtin supervisor gives what the perl supervisor gives, byte
// for byte, for the same call, command and user: its output with the
// sentinels, its status, and the files it leaves (logs, kept copies, their
// modes and owners), down to the command's environment and descriptors.
func TestBuiltinSupervisorParity(t *testing.T) {
	requireSupported(t)
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl: the perl supervisor is the builtin's model")
	}
	type parityCase struct {
		name, command string
		timeout       time.Duration
		stdin         func(c Call) []byte
		wait          time.Duration
		setup         func(root string) error
		end           bool // background processes are killed at the end
	}
	cases := []parityCase{
		{name: "status and output", command: `echo out; echo err >&2; printf 'no newline'; exit 7`},
		{name: "environment", command: `env | grep -v '^_=' | sort; pwd; umask; id; fds=$(ls -l /proc/$$/fd); echo "$fds" | awk '{t = $11; sub(/:\[[0-9]+\]$/, "", t); print $1, $9, $10, t}'; echo "$0 $- $SHLVL"; cat /proc/self/status | grep -E '^(Sig(Ign|Blk)|NoNewPrivs)'; ps -o sid=,pgid= -p $$ | awk '$1 == $2 {print "session leader"}'`},
		{name: "killed by a signal", command: `echo bye; kill -TERM $$`},
		{name: "long output kept", command: `seq 1 3000`},
		{name: "huge output", command: `head -c 3000000 /dev/zero | tr '\0' x; echo`},
		{name: "many short lines", command: `for i in $(seq 2500); do echo; done`},
		{name: "timeout", command: `echo started; sleep 30`, timeout: time.Second},
		{name: "background keeps its log", command: `(sleep 0.3; echo late) & echo started`, wait: 600 * time.Millisecond},
		{name: "background killed", command: `(sleep 0.3; echo late) & (env -u ` + OwnerEnv + ` setsid bash -c 'sleep 0.3; echo daemon' &); echo started`, wait: 600 * time.Millisecond, end: true},
		{name: "double-forked daemon", command: `(env -u ` + OwnerEnv + ` setsid bash -c 'sleep 0.3; echo daemon' &); echo started`, wait: 600 * time.Millisecond},
		{name: "symlink at the kept copy", command: `mkdir -p .bash-output && ln -s "$ROOT/precious" ".bash-output/$` + OwnerEnv + `.log"; seq 3000`},
		{name: "fifo at the kept copy", command: `mkdir -p .bash-output && mkfifo ".bash-output/$` + OwnerEnv + `.log"; seq 3000`},
		{name: "log replaced", command: `l="$ROOT/live/$` + OwnerEnv + `.log"; rm -f "$l"; mkfifo "$l"; echo hi`},
		{name: "log directory is a file", command: "echo hi", setup: func(root string) error {
			return os.WriteFile(filepath.Join(root, "live"), nil, 0o644)
		}},
		{name: "malformed secret", stdin: func(Call) []byte { return []byte("NOT-HEX\necho hi") }},
		{name: "no command", stdin: func(c Call) []byte { return []byte(c.Secret) }},
		{name: "command cut at NUL", stdin: func(c Call) []byte { return []byte(c.Secret + "\necho a\x00echo b") }},
		{name: "command text is data", command: "printf '%s\\n' \"$0\" '$HOME' \"it's\"\ncat; ls /proc/self/fd/3 2>/dev/null || echo closed"},
	}
	users := map[string]*syscall.Credential{"self": nil}
	if os.Geteuid() == 0 {
		users["nobody"] = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	for user, cred := range users {
		for _, tc := range cases {
			t.Run(user+"/"+tc.name, func(t *testing.T) {
				c := NewCall()
				var stdin []byte
				if tc.stdin != nil {
					stdin = tc.stdin(c)
				}
				timeout := orDefault(tc.timeout, 20*time.Second)
				// One root for both in turn: the log paths are in the output.
				root := parityRoot(t)
				var runs [2]supervisorRun
				for i, builtin := range []bool{false, true} {
					resetRoot(t, root)
					if tc.setup != nil {
						require.NoError(t, tc.setup(root))
					}
					runs[i] = runSupervisor(t, builtin, c, root, cred, tc.command, timeout, stdin, tc.wait, tc.end)
				}
				perl, agent := runs[0], runs[1]
				assert.Equal(t, perl.code, agent.code, "status")
				assert.Equal(t, perl.stderr, agent.stderr, "stderr")
				assert.Equal(t, perl.stdout, agent.stdout, "stdout")
				assert.Equal(t, perl.files, agent.files, "files")
			})
		}
	}
}

func orDefault(d, fallback time.Duration) time.Duration {
	if d == 0 {
		return fallback
	}
	return d
}
