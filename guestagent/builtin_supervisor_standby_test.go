//go:build linux

package guestagent

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// withStandbys turns standbys on for the test, as serve does, and ends
// them after it.
func withStandbys(t *testing.T, linger time.Duration) {
	t.Helper()
	enableStandbys()
	was := standbyLinger
	standbyLinger = linger
	t.Cleanup(func() {
		endStandbys()
		standbys.Lock()
		standbys.on = false
		standbys.Unlock()
		standbyLinger = was
	})
}

// runCall runs call's command through the supervisor builtin in the
// current directory and returns what it printed between its sentinels.
func runCall(t *testing.T, call bashproto.Call, command string, logs bashproto.Logs) string {
	t.Helper()
	args, stdin := bashproto.Args(call, command, time.Minute, logs, bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
	var out bytes.Buffer
	code, err := RunBuiltin(agentwire.BuiltinBashSupervisor, args, bytes.NewReader(stdin), &out, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 0, code, out.String())
	got := out.String()
	_, got, ok := strings.Cut(got, "__OMA_DISPATCHED__:"+call.Secret+"\n")
	require.True(t, ok, out.String())
	got, _, ok = strings.Cut(got, "__OMA_TERMINAL__:")
	require.True(t, ok, out.String())
	return got
}

// waitingStandby waits for the standby of call id to be started and
// returns its bash's pid.
func waitingStandby(t *testing.T, id string) int {
	t.Helper()
	standbys.Lock()
	sb := standbys.byID[id]
	standbys.Unlock()
	require.NotNil(t, sb, "no standby for %s", id)
	<-sb.ready
	require.NoError(t, sb.err)
	return sb.cmd.Process.Pid
}

// aStandby runs command as a first call in a new directory, naming a
// second, and returns the second, the pid of the bash started for it and
// the calls' logs.
func aStandby(t *testing.T, command string) (bashproto.Call, int, bashproto.Logs) {
	t.Helper()
	t.Chdir(t.TempDir())
	logs := bashproto.LogsIn(t.TempDir())
	first, second := bashproto.NewCall(), bashproto.NewCall()
	first.Next = second.ID
	runCall(t, first, command, logs)
	return second, waitingStandby(t, second.ID), logs
}

// standbyProbe prints what a command's bash is given: its arguments,
// environment, directory, stdin and the tag its children inherit.
const standbyProbe = `printf '%s|%s|%s|%s|%s\n' "$#" "$0" "$OMA_BASH_OWNER" "$SHLVL" "$PWD"
tr '\0' '\n' </proc/$$/environ | grep -c '^OMA_BASH_OWNER='
sh -c 'echo "child $OMA_BASH_OWNER"'
readlink /proc/$$/fd/0
set | grep -c '^__oma' || true
ps -o sid= -o pgid= -p $$ | awk -v p=$$ '{print ($1 == p) ($2 == p)}'
echo "pid $$"
`

// A call whose id its predecessor named runs in the bash the agent started
// for it as that call ended, and that bash is given what a bash started for
// the call is: no argument, the call's tag (in its own environment too, so
// that a subshell carries it), directory, SHLVL, /dev/null for stdin, no
// variable of the reader's, a session of its own. The text is run whole.
func TestAStandbyRunsTheNextCallAsItsOwnBashWould(t *testing.T) {
	withStandbys(t, time.Minute)
	t.Chdir(t.TempDir())
	logs := bashproto.LogsIn(t.TempDir())
	first, second, third := bashproto.NewCall(), bashproto.NewCall(), bashproto.NewCall()
	first.Next = second.ID
	fresh := runCall(t, first, standbyProbe, logs)
	pid := waitingStandby(t, second.ID)
	assert.NoFileExists(t, second.LogPath(logs.Live), "a standby's log has no name before its call")
	second.Next = third.ID
	ahead := runCall(t, second, standbyProbe, logs)

	assert.Contains(t, ahead, "pid "+strconv.Itoa(pid)+"\n", "the standby ran the call")
	assert.NotContains(t, fresh, "pid "+strconv.Itoa(pid)+"\n")
	unpid := func(s, id string) string {
		s, _, _ = strings.Cut(s, "pid ")
		return strings.ReplaceAll(s, id, "ID")
	}
	assert.Equal(t, unpid(fresh, first.ID), unpid(ahead, second.ID))
	assert.Contains(t, fresh, "1\nchild "+first.ID+"\n/dev/null\n0\n11\n")

	big := strings.Repeat("ü\\x ", 40000)
	command := "  v='" + big + "'\nprintf '%s|%s|' \"$#\" \"$0\"\nprintf '%s' \"$v\" | wc -c\n\n"
	waitingStandby(t, third.ID)
	assert.Equal(t, fmt.Sprintf("0|bash|%d\n", len(big)), runCall(t, third, command, logs))
	assert.NoFileExists(t, second.LogPath(logs.Live))
}

// A standby that no longer fits its call is not used: the call's
// directory is another by then, its log directory is another, or a guest
// killed or stopped it. The call starts its own bash and runs as it would have; the
// standby is gone, its log removed or the call's.
func TestAStandbyThatNoLongerFitsIsNotUsed(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, dir string, pid int, logs *bashproto.Logs)
	}{
		{"workdir replaced", func(t *testing.T, dir string, _ int, _ *bashproto.Logs) {
			require.NoError(t, os.Rename(dir, dir+".old"))
			require.NoError(t, os.Mkdir(dir, 0o755))
			t.Chdir(dir)
		}},
		{"another log directory", func(t *testing.T, _ string, _ int, logs *bashproto.Logs) {
			logs.Live = t.TempDir()
		}},
		{"killed", func(t *testing.T, _ string, pid int, _ *bashproto.Logs) {
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		}},
		{"stopped", func(t *testing.T, _ string, pid int, _ *bashproto.Logs) {
			require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
			require.Eventually(t, func() bool { st, _ := readStat(pid); return st.stopped }, 5*time.Second, time.Millisecond)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			withStandbys(t, time.Minute)
			dir := t.TempDir() + "/w"
			require.NoError(t, os.Mkdir(dir, 0o755))
			t.Chdir(dir)
			logs := bashproto.LogsIn(t.TempDir())
			first, second := bashproto.NewCall(), bashproto.NewCall()
			first.Next = second.ID
			runCall(t, first, "true", logs)
			pid := waitingStandby(t, second.ID)
			c.spoil(t, dir, pid, &logs)

			got := runCall(t, second, `touch here; echo "$OMA_BASH_OWNER $$"`, logs)
			assert.Equal(t, second.ID+" ", strings.TrimRight(got, "0123456789\n"))
			assert.NotEqual(t, strconv.Itoa(pid), strings.Fields(got)[1])
			assert.False(t, liveProcess(pid), "the standby was ended")
			assert.FileExists(t, dir+"/here")
			assert.NoFileExists(t, second.LogPath(logs.Live))
		})
	}
}

// A standby no call takes ends after its linger, and when the host asks
// (standby-end); none is started while the agent runs another call, or by
// an agent that does not serve.
func TestStandbysEnd(t *testing.T) {
	ended := func(t *testing.T, call bashproto.Call, pid int, logs bashproto.Logs) {
		t.Helper()
		require.Eventually(t, func() bool { return !liveProcess(pid) }, 5*time.Second, 10*time.Millisecond)
		standbys.Lock()
		defer standbys.Unlock()
		assert.Empty(t, standbys.byID)
		assert.NoFileExists(t, call.LogPath(logs.Live))
	}
	t.Run("linger", func(t *testing.T) {
		withStandbys(t, 200*time.Millisecond)
		call, pid, logs := aStandby(t, "true")
		ended(t, call, pid, logs)
	})
	t.Run("standby-end", func(t *testing.T) {
		withStandbys(t, time.Minute)
		call, pid, logs := aStandby(t, "true")
		code, err := RunBuiltin(agentwire.BuiltinStandbyEnd, nil, nil, io.Discard, io.Discard)
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.False(t, liveProcess(pid))
		ended(t, call, pid, logs)
	})
	t.Run("another call running", func(t *testing.T) {
		withStandbys(t, time.Minute)
		// This call, through a server, and another.
		callsRunning.Add(2)
		defer callsRunning.Add(-2)
		noStandbyAfterACall(t)
	})
	t.Run("not serving", noStandbyAfterACall)
}

// noStandbyAfterACall runs a call that names a next one and checks that no
// bash was started for it.
func noStandbyAfterACall(t *testing.T) {
	t.Chdir(t.TempDir())
	first := bashproto.NewCall()
	first.Next = bashproto.NewCall().ID
	runCall(t, first, "true", bashproto.LogsIn(t.TempDir()))
	standbys.Lock()
	defer standbys.Unlock()
	assert.Empty(t, standbys.byID)
}

// The name of the log of a call whose bash waits is the guest's to take
// (the standby's environment tells the call's id): the call then fails as
// one that starts its own bash would, and what was planted is neither
// followed nor replaced.
func TestAStandbysLogNameTaken(t *testing.T) {
	withStandbys(t, time.Minute)
	second, pid, logs := aStandby(t, "true")
	target := t.TempDir() + "/target"
	require.NoError(t, os.Symlink(target, second.LogPath(logs.Live)))
	t.Cleanup(func() { os.Remove(second.LogPath(logs.Live)) })

	args, stdin := bashproto.Args(second, "echo ran >ran", time.Minute, logs, bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
	var stderr bytes.Buffer
	code, err := RunBuiltin(agentwire.BuiltinBashSupervisor, args, bytes.NewReader(stdin), io.Discard, &stderr)
	require.NoError(t, err)
	assert.Equal(t, exitNoLog, code)
	assert.Contains(t, stderr.String(), "cannot create the output log")
	assert.NoFileExists(t, target)
	assert.NoFileExists(t, "ran")
	assert.False(t, liveProcess(pid), "the standby was ended")
}

// A call run by a standby counts as its own only the orphans that started
// once it came, not since its bash started: an untagged process an earlier
// call's background process started while the standby waited, and that
// is orphaned during the call, is not the call's background process.
func TestAStandbysCallCountsFromItsHandOff(t *testing.T) {
	withStandbys(t, time.Minute)
	// A, in a session of its own and untagged, starts Q half a second
	// after the first call, then ends a second later: Q is orphaned while
	// the second call runs.
	second, _, logs := aStandby(t, `env -u OMA_BASH_OWNER setsid sh -c 'sleep 0.5; sleep 10 & echo $! > q.pid; sleep 1' >/dev/null 2>&1 </dev/null &`)
	time.Sleep(time.Second)
	t.Cleanup(func() {
		b, _ := os.ReadFile("q.pid")
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	got := runCall(t, second, `sleep 1.5; echo done`, logs)
	assert.Equal(t, "done\n", got, "no process of the call's was left running")
}

// A standby started for one user, or one set of groups, is not handed a
// call of another: the call runs as its own user in a bash of its own, its
// log its user's, and the standby ends.
func TestAStandbyOfAnotherUserIsNotUsed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root")
	}
	root := identity{0, 0}
	nobody := identity{65534, 65534}
	for _, c := range []struct {
		name                  string
		firstUser             identity
		firstCred, secondCred *syscall.Credential
	}{
		{"another user", root, nil, &syscall.Credential{Uid: 65534, Gid: 65534}},
		{"other groups", nobody, &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{65534}}, &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{100}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			withStandbys(t, time.Minute)
			dir, err := os.MkdirTemp("", "standby-user") // t.TempDir's parent is root's alone
			require.NoError(t, err)
			t.Cleanup(func() { os.RemoveAll(dir) })
			require.NoError(t, os.Chmod(dir, 0o777))
			logs := bashproto.Logs{Live: dir + "/live", Kept: dir + "/kept"}
			require.NoError(t, os.Mkdir(logs.Live, 0o777))
			require.NoError(t, os.Chmod(logs.Live, 0o1777))
			supervise := func(call bashproto.Call, command string, user identity, cred *syscall.Credential) string {
				args, stdin := bashproto.Args(call, command, time.Minute, logs, bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
				var out bytes.Buffer
				code := bashSupervisor(&builtinCall{
					Args: args, Stdin: bytes.NewReader(stdin), Stdout: &out, Stderr: io.Discard,
					User: user, Cred: cred, Workdir: dir, Env: os.Environ(),
				})
				require.Equal(t, 0, code, out.String())
				return out.String()
			}
			first, second := bashproto.NewCall(), bashproto.NewCall()
			first.Next = second.ID
			supervise(first, "true", c.firstUser, c.firstCred)
			pid := waitingStandby(t, second.ID)

			// Its uid, groups, its log's owner and its pid.
			got := supervise(second, `echo "$(id -u) $(id -G) $(stat -L -c %u /proc/$$/fd/1) $$"`, nobody, c.secondCred)
			groups := "65534"
			if len(c.secondCred.Groups) > 0 {
				groups = "65534 100"
			}
			assert.Contains(t, got, "\n65534 "+groups+" 65534 ")
			assert.NotContains(t, got, " "+strconv.Itoa(pid)+"\n")
			assert.False(t, liveProcess(pid), "the standby was ended")
		})
	}
}
