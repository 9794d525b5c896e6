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
)

// killPause is bashKill's pause between its looks.
const killPause = 50 * time.Millisecond

// bashKill kills what a bash call left running (args bashproto.KillArgs):
// it asks the call's supervisors to kill and waits for them, the agent's
// own (a kill frame has normally asked already) and those run as processes
// of their own by one msb exec each (by SIGTERM), so that the host's
// cleanup after an abort ends with everything killed, escaped daemons
// too; with no supervisor left, it stops and kills what still carries the
// call's tag.
func bashKill(c *builtinCall) int {
	if len(c.Args) != 1 || !isHexID(c.Args[0]) {
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
			signalSame(pid, start, syscall.SIGTERM)
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

// supervisorProcesses finds the supervisors of call id run as processes of
// their own (`AGENT builtin bash-supervisor ID ...`, one msb exec per
// call) by their argv, with their start times read before it.
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
		if err == nil && builtinSupervisorOf(bytes.Split(b, []byte{0}), id) {
			pids[pid] = st.start
		}
	}
	return pids
}

// builtinSupervisorOf tells whether argv is `AGENT builtin [--revision=N]
// [--ready-fd=N] bash-supervisor ID ...` for call id.
func builtinSupervisorOf(argv [][]byte, id string) bool {
	if len(argv) < 3 || string(argv[1]) != "builtin" {
		return false
	}
	rest := argv[2:]
	for _, option := range []string{"--revision=", "--ready-fd="} {
		if len(rest) > 0 && bytes.HasPrefix(rest[0], []byte(option)) {
			rest = rest[1:]
		}
	}
	return len(rest) > 1 && string(rest[0]) == agentwire.BuiltinBashSupervisor && string(rest[1]) == id
}
