package bashproto

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// supervisorRun is what one supervisor did for a case: its output and
// status, and the files it left.
type supervisorRun struct {
	stdout, stderr string
	code           int
	files          []string // path (relative to the case's root), mode, owner, content
}

// runSupervisor runs the agent's supervisor builtin for call c in root
// (its logs under root, its workdir root/work) as cred (nil: this
// process's user), with an environment of its own.
func runSupervisor(t *testing.T, c Call, root string, cred *syscall.Credential, command string, timeout time.Duration, stdin []byte, wait time.Duration, end bool) supervisorRun {
	t.Helper()
	logs := Logs{Live: filepath.Join(root, "live"), Kept: filepath.Join(root, "work", KeptLogDirName)}
	args, in := Args(c, command, timeout, logs, Limits{MaxLines: 2000, MaxBytes: 50 << 10, EndBackground: end})
	if stdin != nil {
		in = stdin
	}
	cmd := supervisor(t, args)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	cmd.Dir = filepath.Join(root, "work")
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "ROOT=" + root}
	cmd.SysProcAttr.Credential = cred
	// A descriptor the supervisor's starter leaks (fd 9, open without
	// close-on-exec) must not reach the command.
	leaked, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer leaked.Close()
	cmd.ExtraFiles = []*os.File{6: leaked}
	// Nor do signals its starter ignored (as nohup does SIGHUP) stay
	// ignored in the command.
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	cmd.Path, cmd.Args = bash, append([]string{"bash", "-c", `trap "" HUP INT; exec "$@"`, "bash"}, cmd.Args...)
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

// goldenRoot is a fresh directory any user may use (t.TempDir's parent is
// private to root).
func goldenRoot(t *testing.T) string {
	root, err := os.MkdirTemp("", "bsup-golden-")
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

// update rewrites the golden files from what the supervisor gives now.
var update = flag.Bool("update", false, "rewrite testdata/supervisor from the supervisor's runs")

// text renders a run for its golden file: the call's root, id and secret
// replaced by ROOT, ID and SECRET, and any field longer than 4 KiB by its
// size and digest.
func (r supervisorRun) text(c Call, root string) string {
	norm := func(s string) string {
		s = strings.NewReplacer(root, "ROOT", c.ID, "ID", c.Secret, "SECRET").Replace(s)
		if len(s) > 4<<10 {
			return fmt.Sprintf("(%d bytes, sha256 %x)", len(s), sha256.Sum256([]byte(s)))
		}
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "status %d\nstderr %q\nstdout %q\n", r.code, norm(r.stderr), norm(r.stdout))
	for _, f := range r.files {
		fmt.Fprintf(&b, "file %q\n", norm(f))
	}
	return b.String()
}

// The agent's supervisor gives, for each call, command and user, exactly
// what testdata/supervisor holds (recorded while it was held byte for byte
// to the perl supervisor that was its model): its output with the sentinels, its
// status, and the files it leaves (logs, kept copies, their modes and
// owners), down to the command's environment and descriptors. The users
// are root and nobody, so the test needs root.
func TestSupervisorGolden(t *testing.T) {
	requireSupported(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the supervisor as root and as nobody")
	}
	type goldenCase struct {
		name, command string
		timeout       time.Duration
		stdin         func(c Call) []byte
		wait          time.Duration
		setup         func(root string) error
		end           bool // background processes are killed at the end
	}
	cases := []goldenCase{
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
	users := map[string]*syscall.Credential{"root": nil, "nobody": {Uid: 65534, Gid: 65534}}
	for user, cred := range users {
		for _, tc := range cases {
			t.Run(user+"/"+tc.name, func(t *testing.T) {
				c := NewCall()
				var stdin []byte
				if tc.stdin != nil {
					stdin = tc.stdin(c)
				}
				root := goldenRoot(t)
				resetRoot(t, root)
				if tc.setup != nil {
					require.NoError(t, tc.setup(root))
				}
				got := runSupervisor(t, c, root, cred, tc.command, orDefault(tc.timeout, 20*time.Second), stdin, tc.wait, tc.end).text(c, root)
				golden := filepath.Join("testdata", "supervisor", user, strings.ReplaceAll(tc.name, " ", "-")+".golden")
				if *update {
					require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
					require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
				}
				want, err := os.ReadFile(golden)
				require.NoError(t, err)
				assert.Equal(t, string(want), got)
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
