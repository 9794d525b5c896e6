//go:build linux

package guestagent

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
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
		for pid, start := range procs {
			signalSame(pid, start, syscall.SIGUSR1)
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
		// Start times read before the tags: a pid taken by another
		// process since then is not signalled.
		ps := scanProcs()
		pids := tagged(id)
		if len(pids) == 0 {
			return 0
		}
		for _, pid := range pids {
			signalSame(pid, ps[pid].start, syscall.SIGSTOP)
		}
		for _, pid := range pids {
			signalSame(pid, ps[pid].start, syscall.SIGKILL)
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

func supervisorsGone(sups []*supervision, procs map[int]uint64) bool {
	for _, s := range sups {
		select {
		case <-s.done:
		default:
			return false
		}
	}
	for pid, start := range procs {
		if st, ok := readStat(pid); ok && st.start == start {
			return false
		}
	}
	return true
}

// supervisorProcesses finds the supervisors of call id that run as
// processes of their own by their argv, with their start times read
// before it: the script's, and the builtin's run by `AGENT builtin` (one
// msb exec per call), which ends on SIGUSR1 as the script's does.
func supervisorProcesses(id string) map[int]uint64 {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	self := os.Getpid()
	pids := map[int]uint64{}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 || pid == self {
			continue
		}
		st, live := readStat(pid)
		if !live {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/cmdline")
		if err != nil {
			continue
		}
		argv := bytes.Split(b, []byte{0})
		if len(argv) > 4 && string(argv[3]) == bashproto.SupervisorName && string(argv[4]) == id || builtinSupervisorOf(argv, id) {
			pids[pid] = st.start
		}
	}
	return pids
}

// builtinSupervisorOf tells whether argv is `AGENT builtin [--ready-fd=N]
// bash-supervisor ID ...` for call id.
func builtinSupervisorOf(argv [][]byte, id string) bool {
	if len(argv) < 3 || string(argv[1]) != "builtin" {
		return false
	}
	rest := argv[2:]
	if bytes.HasPrefix(rest[0], []byte("--ready-fd=")) {
		rest = rest[1:]
	}
	return len(rest) > 1 && string(rest[0]) == agentwire.BuiltinBashSupervisor && string(rest[1]) == id
}
