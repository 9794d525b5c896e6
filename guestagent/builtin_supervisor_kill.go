//go:build linux

package guestagent

import (
	"fmt"
	"syscall"
	"time"
)

// killPause is bashKill's pause between its looks.
const killPause = 50 * time.Millisecond

// bashKill kills what a bash call left running (args bashproto.KillArgs):
// it asks the agent's supervisors of the call to kill and waits for them
// (a kill frame has normally asked already, and this call returns only
// once they are done, so the host's cleanup after an abort ends with
// everything killed); with no supervisor left, it stops and kills what
// still carries the call's tag.
func bashKill(c *builtinCall) int {
	if len(c.Args) != 1 || !hexID.MatchString(c.Args[0]) {
		fmt.Fprintf(c.Stderr, "oma-sandbox: malformed bash kill request: %q\n", c.Args)
		return 2
	}
	id := c.Args[0]
	if sups := supervisorsOf(id); len(sups) > 0 {
		for _, s := range sups {
			s.stop()
		}
		for range 100 {
			if supervisorsGone(sups) {
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

func supervisorsGone(sups []*supervision) bool {
	for _, s := range sups {
		select {
		case <-s.done:
		default:
			return false
		}
	}
	return true
}
