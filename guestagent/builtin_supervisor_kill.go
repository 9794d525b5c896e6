//go:build linux

package guestagent

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// killPause is the kill script's pause between its looks.
const killPause = 50 * time.Millisecond

// bashKill is bashproto.KillScript done by the agent. Besides the
// supervisors the script finds by their argv (a call run as a script),
// it asks the agent's own supervisors of the call to kill and waits for
// them: a kill frame has normally asked already, and this call returns
// only once they are done, so the host's cleanup after an abort ends with
// everything killed, as with a supervisor process.
func bashKill(c *builtinCall) int {
	if len(c.Args) != 1 || !hexID.MatchString(c.Args[0]) {
		fmt.Fprintf(c.Stderr, "oma-sandbox: malformed bash kill request: %q\n", c.Args)
		return 2
	}
	id := c.Args[0]
	sups := supervisorsOf(id)
	procs := supervisorProcesses(id)
	if len(sups) > 0 || len(procs) > 0 {
		for _, s := range sups {
			s.stop()
		}
		for _, pid := range procs {
			_ = syscall.Kill(pid, syscall.SIGUSR1)
		}
		for range 100 {
			if supervisorsGone(sups, procs) {
				return 0
			}
			if !killWait(c.Killed) {
				break
			}
		}
		fmt.Fprintf(c.Stderr, "the supervisor of bash call %s did not end\n", id)
		return 1
	}
	for range 10 {
		pids := tagged(id)
		if len(pids) == 0 {
			return 0
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if !killWait(c.Killed) {
			break
		}
	}
	fmt.Fprintf(c.Stderr, "processes of bash call %s survived SIGKILL\n", id)
	return 1
}

// killWait waits killPause; false when the call is killed first.
func killWait(killed <-chan struct{}) bool {
	t := time.NewTimer(killPause)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-killed:
		return false
	}
}

func supervisorsGone(sups []*supervision, procs []int) bool {
	for _, s := range sups {
		select {
		case <-s.done:
		default:
			return false
		}
	}
	for _, pid := range procs {
		if syscall.Kill(pid, 0) == nil {
			return false
		}
	}
	return true
}

// supervisorProcesses finds the script supervisors of call id by their
// argv, as the kill script does.
func supervisorProcesses(id string) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	self := os.Getpid()
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/cmdline")
		if err != nil {
			continue
		}
		argv := bytes.Split(b, []byte{0})
		if len(argv) > 4 && string(argv[3]) == bashproto.SupervisorName && string(argv[4]) == id {
			pids = append(pids, pid)
		}
	}
	return pids
}
