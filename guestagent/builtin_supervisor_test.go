//go:build linux

package guestagent

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// supervise starts call id as the bash-supervisor builtin running command
// for bashproto call c, with logs in dir.
func (h *agentHost) supervise(id uint64, c bashproto.Call, command string, secs time.Duration, dir string, run agentwire.Run) {
	h.t.Helper()
	args, stdin := bashproto.Args(c, command, secs, bashproto.Logs{Live: dir + "/live", Kept: dir + "/kept"},
		bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
	run.ID, run.Builtin, run.Stdin = id, agentwire.BuiltinBashSupervisor, true
	if run.MaxOutput == 0 {
		run.MaxOutput = 1 << 20
	}
	for _, a := range args {
		run.Args = append(run.Args, []byte(a))
	}
	h.send(&run)
	h.send(&agentwire.Stdin{ID: id, Data: stdin})
	h.send(&agentwire.EOF{ID: id})
}

// wait reads frames until call id's exit and returns its output.
func (h *agentHost) wait(id uint64) (string, *agentwire.Exit) {
	h.t.Helper()
	exit := h.waitFor(id, 15*time.Second)
	return h.out[id], exit
}

// The command's bash runs its text exactly, however long and whatever its
// characters, with no positional parameter: the count CommandReader is
// given bounds what it reads, never the text.
func TestCommandReaderRunsTheWholeText(t *testing.T) {
	big := strings.Repeat("ü\\x ", 40000) // 200,000 bytes, 160,000 characters
	command := "  v='" + big + "'\nprintf '%s|%s|' \"$#\" \"$0\"\nprintf '%s' \"$v\" | wc -c\nprintf '%s' \"$v\" | sha256sum\n\n"
	args, stdin := bashproto.Args(bashproto.NewCall(), command, time.Minute, bashproto.LogsIn(t.TempDir()), bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
	var out bytes.Buffer
	code, err := RunBuiltin(agentwire.BuiltinBashSupervisor, args, bytes.NewReader(stdin), &out, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 0, code, out.String())
	assert.Contains(t, out.String(), fmt.Sprintf("0|bash|%d\n%x  -\n", len(big), sha256.Sum256([]byte(big))))
}

// liveProcess reports whether pid is a process that is not a zombie.
func liveProcess(pid int) bool {
	_, ok := readStat(pid)
	return ok
}

// waitForPids waits for file to list n pids and returns them.
func waitForPids(t *testing.T, file string, n int) []int {
	t.Helper()
	var pids []int
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(file)
		pids = pids[:0]
		for f := range strings.FieldsSeq(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return len(pids) >= n && strings.HasSuffix(string(data), "\n")
	}, 10*time.Second, 10*time.Millisecond, "%s", file)
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pids
}

// treeCommand starts, under the command, a setsid loop, a daemon that
// double-forks away without the owner tag, and a plain grandchild, and
// writes their pids and its own to $PIDS, its own last, once it printed
// "started".
const treeCommand = `setsid bash -c 'echo $$ >> "$PIDS"; while :; do sleep 0.05; done' &
(env -u ` + bashproto.OwnerEnv + ` setsid bash -c 'echo $$ >> "$PIDS"; exec sleep 100' &)
(sleep 100 & echo $! >> "$PIDS"; wait) &
echo started; echo $$ >> "$PIDS"; `

// A kill frame, the agent's guest timer and the output cap each end the
// supervisor at once, with every process of the command killed, the
// double-forked daemon too: the agent adopted it.
func TestBashSupervisorKilled(t *testing.T) {
	for _, tc := range []struct {
		name, tail string
		run        agentwire.Run
		kill       bool
		check      func(t *testing.T, out string, exit *agentwire.Exit, c bashproto.Call)
	}{
		{name: "kill frame", tail: "sleep 100", kill: true, check: func(t *testing.T, out string, exit *agentwire.Exit, c bashproto.Call) {
			// The log is relayed every 10 ms, and a kill drops what was not
			// relayed yet (as perl does): "started" may not have gone out.
			dispatched, terminal := "__OMA_DISPATCHED__:"+c.Secret+"\n", "__OMA_TERMINAL__:"+c.Secret+":exit:137\n"
			assert.Contains(t, []string{dispatched + "started\n" + terminal, dispatched + terminal}, out)
			assert.Equal(t, 137, exit.Code)
			assert.False(t, exit.TimedOut)
		}},
		{name: "guest timer", tail: "sleep 100", run: agentwire.Run{TimeoutMS: 1500}, check: func(t *testing.T, out string, exit *agentwire.Exit, c bashproto.Call) {
			assert.True(t, strings.HasSuffix(out, "started\n__OMA_TERMINAL__:"+c.Secret+":exit:137\n"), "%q", out)
			assert.True(t, exit.TimedOut)
		}},
		{name: "output cap", tail: "sleep 0.3; yes; sleep 100", run: agentwire.Run{MaxOutput: 300 << 10}, check: func(t *testing.T, out string, exit *agentwire.Exit, c bashproto.Call) {
			assert.Len(t, out, 300<<10)
			assert.True(t, exit.Overflow)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "pids")
			t.Setenv("PIDS", pidFile)
			h := startAgentHost(t, t.TempDir())
			c := bashproto.NewCall()
			began := time.Now()
			h.supervise(1, c, treeCommand+tc.tail, time.Minute, dir, tc.run)
			pids := waitForPids(t, pidFile, 4)
			if tc.kill {
				h.send(&agentwire.Kill{ID: 1})
			}
			out, exit := h.wait(1)
			assert.Less(t, time.Since(began), 8*time.Second)
			tc.check(t, out, exit, c)
			for _, pid := range pids {
				assert.False(t, liveProcess(pid), "pid %d survived", pid)
			}
		})
	}
}

// A stdin that never ends does not hold a killed supervisor.
func TestBashSupervisorKilledReadingStdin(t *testing.T) {
	h := startAgentHost(t, t.TempDir())
	args, _ := bashproto.Args(bashproto.NewCall(), "true", time.Minute, bashproto.LogsIn(t.TempDir()), bashproto.Limits{MaxLines: 1, MaxBytes: 1})
	run := &agentwire.Run{ID: 1, Builtin: agentwire.BuiltinBashSupervisor, Stdin: true, MaxOutput: 1 << 20}
	for _, a := range args {
		run.Args = append(run.Args, []byte(a))
	}
	h.send(run)
	h.send(&agentwire.Stdin{ID: 1, Data: []byte("abc")})
	time.Sleep(100 * time.Millisecond)
	h.send(&agentwire.Kill{ID: 1})
	out, exit := h.wait(1)
	assert.Empty(t, out)
	assert.Equal(t, bashproto.TimeoutExitCode, exit.Code)
}

// A guest process that holds the read end of the command's stdin (opened
// through /proc) and kills the command's bash before it read all of a long
// command cannot leave the agent writing the text for good: the call ends
// once the command is gone.
func TestBashSupervisorStdinHeldByAnother(t *testing.T) {
	dir := t.TempDir()
	h := startAgentHost(t, t.TempDir())
	c := bashproto.NewCall()
	args, stdin := bashproto.Args(c, "#"+strings.Repeat("x", 200<<10), time.Minute,
		bashproto.Logs{Live: dir + "/live", Kept: dir + "/kept"}, bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
	run := &agentwire.Run{ID: 1, Builtin: agentwire.BuiltinBashSupervisor, Stdin: true, MaxOutput: 1 << 20}
	for _, a := range args {
		run.Args = append(run.Args, []byte(a))
	}
	h.send(run)
	for chunk := range slices.Chunk(stdin, agentwire.MaxChunk) {
		h.send(&agentwire.Stdin{ID: 1, Data: chunk})
	}
	h.send(&agentwire.EOF{ID: 1})

	// bash reads the text a byte at a time: the agent is still writing it.
	var bash int
	require.Eventually(t, func() bool {
		for _, pid := range children() {
			if tag, ok := ownerTag(pid); ok && tag == c.ID {
				bash = pid
			}
		}
		return bash != 0
	}, 10*time.Second, time.Millisecond)
	if err := syscall.Kill(bash, syscall.SIGSTOP); err != nil {
		t.Skipf("bash read the whole command before it could be stopped: %v", err)
	}
	held, err := os.Open("/proc/" + strconv.Itoa(bash) + "/fd/0")
	if err != nil {
		t.Skipf("bash ended before its stdin could be held: %v", err)
	}
	defer held.Close()
	require.NoError(t, syscall.Kill(bash, syscall.SIGKILL))

	out, exit := h.wait(1)
	assert.Equal(t, 137, exit.Code)
	assert.True(t, strings.HasSuffix(out, ":exit:137\n"), "%q", out)
}

// bash-kill asks the agent's own supervisor of the call to kill and returns
// once it has ended, so the host's cleanup after an abort (a kill frame,
// then bash-kill) ends with nothing of the command left, not even the
// daemon that only the supervisor can find.
func TestBashKillWaits(t *testing.T) {
	for _, frame := range []bool{true, false} {
		t.Run("kill frame "+strconv.FormatBool(frame), func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "pids")
			t.Setenv("PIDS", pidFile)
			h := startAgentHost(t, t.TempDir())
			c := bashproto.NewCall()
			h.supervise(1, c, treeCommand+"sleep 100", time.Minute, dir, agentwire.Run{})
			pids := waitForPids(t, pidFile, 4)
			if frame {
				h.send(&agentwire.Kill{ID: 1})
			}
			h.send(&agentwire.Run{ID: 2, Builtin: agentwire.BuiltinBashKill, Args: [][]byte{[]byte(c.ID)}, MaxOutput: 1 << 20})
			out, exit := h.wait(2)
			assert.Equal(t, 0, exit.Code, out)
			for _, pid := range pids {
				assert.False(t, liveProcess(pid), "pid %d survived the kill", pid)
			}
			out, exit = h.wait(1)
			assert.Equal(t, 137, exit.Code)
			assert.True(t, strings.HasSuffix(out, ":exit:137\n"), "%q", out)

			h.send(&agentwire.Run{ID: 3, Builtin: agentwire.BuiltinBashKill, Args: [][]byte{[]byte("not hex")}, MaxOutput: 1 << 20})
			out, exit = h.wait(3)
			assert.Equal(t, 2, exit.Code)
			assert.Equal(t, `oma-sandbox: malformed bash kill request: ["not hex"]`+"\n", out)
		})
	}
}

// The agent adopts the orphans of every call, but a supervisor's kill
// takes only its own: an earlier call's background daemon and a daemon
// another call in flight tagged survive a timeout.
func TestBashSupervisorSparesOtherCalls(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PIDS", filepath.Join(dir, "pids"))
	h := startAgentHost(t, t.TempDir())

	earlier := bashproto.NewCall()
	h.supervise(1, earlier, `(env -u `+bashproto.OwnerEnv+` setsid sleep 100 & echo $! > "$PIDS.earlier")`, time.Minute, dir, agentwire.Run{})
	out, exit := h.wait(1)
	require.Equal(t, 0, exit.Code, out)
	assert.Contains(t, out, "[Background processes are still running;")
	earlierDaemon := waitForPids(t, filepath.Join(dir, "pids.earlier"), 1)[0]

	concurrent := bashproto.NewCall()
	h.supervise(2, concurrent, `sleep 0.5; (setsid sleep 100 & echo $! > "$PIDS.concurrent"); sleep 100`, time.Minute, dir, agentwire.Run{})
	timedOut := bashproto.NewCall()
	h.supervise(3, timedOut, `(env -u `+bashproto.OwnerEnv+` setsid sleep 100 & echo $! > "$PIDS.timedout"); sleep 100`, time.Second, dir, agentwire.Run{})
	concurrentDaemon := waitForPids(t, filepath.Join(dir, "pids.concurrent"), 1)[0]
	ownDaemon := waitForPids(t, filepath.Join(dir, "pids.timedout"), 1)[0]
	out, _ = h.wait(3)
	assert.True(t, strings.HasSuffix(out, ":timeout:137\n"), "%q", out)
	assert.False(t, liveProcess(ownDaemon), "its own daemon survived")
	assert.True(t, liveProcess(earlierDaemon), "an earlier call's daemon was killed")
	assert.True(t, liveProcess(concurrentDaemon), "a daemon of the call in flight was killed")

	h.send(&agentwire.Kill{ID: 2})
	_, exit = h.wait(2)
	assert.Equal(t, 137, exit.Code)
	assert.False(t, liveProcess(concurrentDaemon), "its call's kill missed the daemon")
}

// An earlier call's daemon that double-forks while a later call runs
// leaves an orphan the agent adopts during that call, started after its
// command: tagged with the earlier call's id, it stays the earlier call's,
// and the later call's timeout spares it.
func TestBashSupervisorSparesLateOrphansOfEndedCalls(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PIDS", filepath.Join(dir, "pids"))
	h := startAgentHost(t, t.TempDir())

	h.supervise(1, bashproto.NewCall(), `(setsid bash -c 'echo $$ > "$PIDS.daemon"; sleep 0.5; (sleep 100 & echo $! > "$PIDS.late"); exec sleep 100' &)`, time.Minute, dir, agentwire.Run{})
	out, exit := h.wait(1)
	require.Equal(t, 0, exit.Code, out)
	daemon := waitForPids(t, filepath.Join(dir, "pids.daemon"), 1)[0]

	h.supervise(2, bashproto.NewCall(), `sleep 100`, time.Second, dir, agentwire.Run{})
	late := waitForPids(t, filepath.Join(dir, "pids.late"), 1)[0]
	out, _ = h.wait(2)
	assert.True(t, strings.HasSuffix(out, ":timeout:137\n"), "%q", out)
	assert.True(t, liveProcess(late), "the earlier call's late orphan was killed")
	assert.True(t, liveProcess(daemon), "the earlier call's daemon was killed")
}

// signalSame signals a process only while it has the start time a scan
// found: a process that took a dead one's pid is left alone.
func TestSignalSameSparesAnotherProcess(t *testing.T) {
	cmd := exec.Command("sleep", "100")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	st, ok := readStat(pid)
	require.True(t, ok)

	signalSame(pid, st.start+1, syscall.SIGKILL)
	time.Sleep(50 * time.Millisecond)
	assert.True(t, liveProcess(pid), "a process with another start time was signalled")

	signalSame(pid, st.start, syscall.SIGKILL)
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
}

// The agent reaps the orphans it adopted, and never a child os/exec
// started: that one's Wait still gets its status. So it does on a kernel
// without the children lists (CONFIG_PROC_CHILDREN), scanning /proc.
func TestReapAdoptedLeavesOsExecChildren(t *testing.T) {
	if !enterSubreaper() {
		t.Skip("the agent cannot be a child subreaper here")
	}
	defer leaveSubreaper()
	t.Run("children lists", testReapAdopted)
	t.Run("no children lists", func(t *testing.T) {
		lists := taskChildren
		taskChildren = func(int, string) string { return "/proc/self/task/no-such-file" }
		defer func() { taskChildren = lists }()
		testReapAdopted(t)
	})
}

func testReapAdopted(t *testing.T) {
	// A supervisor still running (an earlier test's call ending on a
	// loaded machine) reaps every adopted zombie too, the orphan below
	// among them: only this test may be the subreaper's holder.
	require.Eventually(t, func() bool {
		subreaper.Lock()
		defer subreaper.Unlock()
		return subreaper.calls == 1
	}, time.Minute, 10*time.Millisecond, "a bash supervisor of an earlier test is still running")
	pidFile := filepath.Join(t.TempDir(), "orphan")
	// The orphan is reparented to this process and ends as a zombie.
	require.NoError(t, exec.Command("/bin/bash", "-c", `(sleep 0.05 & echo $! > "$1")`, "bash", pidFile).Run())
	orphan := waitForPids(t, pidFile, 1)[0]
	child := exec.Command("/bin/bash", "-c", "exit 7")
	require.NoError(t, child.Start())
	require.Eventually(t, func() bool { return !liveProcess(orphan) && !liveProcess(child.Process.Pid) }, 5*time.Second, 10*time.Millisecond)
	assert.Subset(t, children(), []int{orphan, child.Process.Pid}, "both are zombies of this process")

	reapAdopted()
	assert.NotContains(t, children(), orphan, "the orphan is reaped")
	assert.Contains(t, children(), child.Process.Pid, "the child is not")
	err := child.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 7, ee.ExitCode())
}

// parentDir reads a path as the perl supervisor's mkdirs does: the parent
// of its last component, none for one component or a child of /.
func TestParentDir(t *testing.T) {
	for dir, want := range map[string]string{
		"/tmp/oma-bash": "/tmp",
		"/a//b/c//":     "/a//b",
		"/a":            "",
		"//a/":          "",
		"a":             "",
		"a/b":           "a",
		"/":             "",
	} {
		assert.Equal(t, want, parentDir(dir), dir)
	}
}

// A background process that writes on and on cannot hold a call whose log
// is kept (or fill the workspace with it), nor can a command that made its
// log sparse and huge: the kept copy is what was relayed.
func TestKeepCopiesWhatWasRelayed(t *testing.T) {
	const relayed = 16 << 20
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	start := func(t *testing.T) (*supervision, string) {
		dir := t.TempDir()
		s := &supervision{
			call: &builtinCall{User: identity{uint32(os.Geteuid()), uint32(os.Getegid())}, Stdout: io.Discard},
			args: supervisorArgs{id: "0123abcd", logdir: dir + "/live", keptdir: dir + "/kept"},
		}
		s.logPath = s.args.logdir + "/" + s.args.id + ".log"
		var err error
		s.log, s.logReader, err = createLog(s.call.User, s.args.logdir, s.logPath)
		require.NoError(t, err)
		t.Cleanup(func() { s.log.Close(); s.logReader.Close() })
		for range relayed / len(chunk) {
			_, err := s.log.Write(chunk)
			require.NoError(t, err)
		}
		s.relay()
		require.EqualValues(t, relayed, s.relayed)
		return s, s.args.keptdir + "/" + s.args.id + ".log"
	}
	keptSize := func(t *testing.T, kept string) int64 {
		st, err := os.Stat(kept)
		require.NoError(t, err)
		return st.Size()
	}
	t.Run("a writer appends during the copy", func(t *testing.T) {
		s, kept := start(t)
		stop, appended := make(chan struct{}), make(chan int)
		go func() {
			// From the moment the copy exists until keep returns, or 256 MiB.
			n := 0
			for n < 256 {
				select {
				case <-stop:
					appended <- n
					return
				default:
				}
				if _, err := os.Lstat(kept); err != nil {
					continue
				}
				if _, err := s.log.Write(chunk); err != nil {
					break
				}
				n++
			}
			appended <- n
		}()
		s.keep()
		close(stop)
		n := <-appended
		assert.EqualValues(t, relayed, keptSize(t, kept), "the writer appended %d MiB", n)
	})
	t.Run("a sparse log", func(t *testing.T) {
		s, kept := start(t)
		require.NoError(t, s.log.Truncate(256<<20))
		s.keep()
		assert.EqualValues(t, relayed, keptSize(t, kept))
	})
	t.Run("past the output cap", func(t *testing.T) {
		s, kept := start(t)
		s.call.Stdout = failingWriter{}
		_, err := s.log.Write(chunk)
		require.NoError(t, err)
		s.relay() // one chunk read, its write fails: no more is read
		require.NoError(t, s.log.Truncate(256<<20))
		s.relay()
		s.keep()
		assert.EqualValues(t, relayed+64<<10, keptSize(t, kept))
	})
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
