//go:build linux

package guestagent

import (
	"os"
	"syscall"
)

// killTree SIGKILLs a call's whole tree: proc, its descendants, and the
// members of its process group pgid (children whose parent already died).
// Members are stopped first so that none can fork a child that escapes the
// walk. proc itself is signalled through its pidfd, so a reaped proc is
// never confused with a recycled pid, and every other process only while
// it has the start time the scan found (signalSame); a group id is not
// reused while the group has a member.
func killTree(proc *os.Process, pgid int) {
	stopped := map[int]uint64{}
	if proc.Signal(syscall.SIGSTOP) == nil {
		stopped[proc.Pid] = 0
	}
	_ = syscall.Kill(-pgid, syscall.SIGSTOP)
	for grew := true; grew; {
		grew = false
		ps := scanProcs()
		roots := []int{proc.Pid}
		for pid, p := range ps {
			if p.pgrp == pgid {
				roots = append(roots, pid)
			}
		}
		for pid, start := range tree(ps, roots) {
			if _, ok := stopped[pid]; !ok {
				stopped[pid], grew = start, true
				signalSame(pid, start, syscall.SIGSTOP)
			}
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = proc.Kill()
	for pid, start := range stopped {
		if pid != proc.Pid {
			signalSame(pid, start, syscall.SIGKILL)
		}
	}
}
