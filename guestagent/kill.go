//go:build linux

package guestagent

import (
	"os"
	"slices"
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
	seen := map[int]uint64{}
	var roots []int
	if proc.Signal(syscall.SIGSTOP) == nil {
		seen[proc.Pid] = 0
		roots = append(roots, proc.Pid)
	}
	_ = syscall.Kill(-pgid, syscall.SIGSTOP)
	for grew := true; grew; {
		grew = false
		ps := scanProcs()
		children := map[int][]int{}
		queue := slices.Clone(roots)
		for pid, p := range ps {
			children[p.ppid] = append(children[p.ppid], pid)
			if p.pgrp == pgid {
				queue = append(queue, pid)
			}
		}
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			if _, ok := seen[pid]; !ok {
				seen[pid], grew = ps[pid].start, true
				signalSame(pid, ps[pid].start, syscall.SIGSTOP)
			}
			for _, c := range children[pid] {
				if _, ok := seen[c]; !ok {
					queue = append(queue, c)
				}
			}
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = proc.Kill()
	for pid, start := range seen {
		if pid != proc.Pid {
			signalSame(pid, start, syscall.SIGKILL)
		}
	}
}
