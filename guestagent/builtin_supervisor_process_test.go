//go:build linux

package guestagent

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// A bash supervisor run as a process of its own (one msb exec per call)
// outlives a host that kills the exec's whole process group, and kills the
// command's tree, a daemon that escaped without the owner tag too, when
// bash-kill asks. As a group or session leader, which cannot start a
// session in place, it runs again as a child that can.
func TestBashSupervisorProcessOutlivesItsExec(t *testing.T) {
	agent := agenttest.AgentBinary(t)
	for _, start := range []string{"group member", "group leader", "session leader"} {
		leader := start != "group member"
		t.Run(start, func(t *testing.T) {
			dir := t.TempDir()
			pidsFile := filepath.Join(dir, "pids")
			call := bashproto.NewCall()
			args, stdin := bashproto.Args(call, treeCommand+"sleep 100", 60*time.Second,
				bashproto.Logs{Live: dir + "/live", Kept: dir + "/kept"}, bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
			// The exec: a shell that leads its group, as msb exec's process
			// does, with the supervisor in it as a member or as the leader,
			// asked for this revision as msb's one exec per call asks.
			argv := append([]string{agent, "builtin", agentwire.RevisionOption(), agentwire.BuiltinBashSupervisor}, args...)
			var exec0 *exec.Cmd
			if leader {
				exec0 = exec.Command(argv[0], argv[1:]...)
			} else {
				exec0 = exec.Command("/bin/bash", append([]string{"-c", `"$@"; exit $?`, "exec"}, argv...)...)
			}
			exec0.Args[0] = "oma-guest-agent"
			if !leader {
				exec0.Args[0] = "bash"
			}
			exec0.Stdin = bytes.NewReader(stdin)
			exec0.Env = append(os.Environ(), "PIDS="+pidsFile)
			exec0.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if start == "session leader" { // as the real msb's exec starts it
				exec0.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			}
			require.NoError(t, exec0.Start())
			pids := waitForPids(t, pidsFile, 4)

			require.NoError(t, syscall.Kill(-exec0.Process.Pid, syscall.SIGKILL), "the host kills the exec")
			_ = exec0.Wait()
			for _, pid := range pids {
				assert.True(t, liveProcess(pid), "pid %d died with the exec", pid)
			}

			kill := exec.Command(agent, "builtin", agentwire.BuiltinBashKill, call.ID)
			kill.Args[0] = "oma-guest-agent"
			out, err := kill.CombinedOutput()
			require.NoError(t, err, "%s", out)
			for _, pid := range pids {
				assert.Eventually(t, func() bool { return !liveProcess(pid) }, 5*time.Second, 10*time.Millisecond,
					"pid %d survived bash-kill", pid)
			}
		})
	}
}

// SIGTERM to a supervisor run as a process of its own ends the call as a
// kill frame does: the command's whole tree is killed and it exits. Sent
// to a group leader, which runs the supervisor as its child, it reaches
// that child.
func TestBashSupervisorProcessEndsOnSIGTERM(t *testing.T) {
	agent := agenttest.AgentBinary(t)
	dir := t.TempDir()
	pidsFile := filepath.Join(dir, "pids")
	args, stdin := bashproto.Args(bashproto.NewCall(), treeCommand+"sleep 100", 60*time.Second,
		bashproto.Logs{Live: dir + "/live", Kept: dir + "/kept"}, bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
	sup := exec.Command(agent, append([]string{"builtin", agentwire.BuiltinBashSupervisor}, args...)...)
	sup.Args[0] = "oma-guest-agent"
	sup.Stdin = bytes.NewReader(stdin)
	sup.Env = append(os.Environ(), "PIDS="+pidsFile)
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group leader
	require.NoError(t, sup.Start())
	pids := waitForPids(t, pidsFile, 4)
	require.NoError(t, sup.Process.Signal(syscall.SIGTERM))
	exited := make(chan struct{})
	go func() { _ = sup.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-sup.Process.Pid, syscall.SIGKILL)
		t.Fatal("the supervisor did not end on SIGTERM")
	}
	for _, pid := range pids {
		assert.Eventually(t, func() bool { return !liveProcess(pid) }, 5*time.Second, 10*time.Millisecond,
			"pid %d survived the SIGTERM", pid)
	}
}
