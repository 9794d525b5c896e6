//go:build linux

package guestagent

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"syscall"
)

// killTree SIGKILLs a call's whole tree: proc, its descendants, and the
// members of its process group pgid (children whose parent already died).
// Members are stopped first so that none can fork a child that escapes the
// walk. proc itself is signalled through its pidfd, so a reaped proc is
// never confused with a recycled pid; a group id is not reused while the
// group has a member.
func killTree(proc *os.Process, pgid int) {
	seen := map[int]bool{}
	var roots []int
	if proc.Signal(syscall.SIGSTOP) == nil {
		seen[proc.Pid] = true
		roots = append(roots, proc.Pid)
	}
	_ = syscall.Kill(-pgid, syscall.SIGSTOP)
	for grew := true; grew; {
		grew = false
		children := map[int][]int{}
		queue := slices.Clone(roots)
		for _, p := range listProcs() {
			children[p.ppid] = append(children[p.ppid], p.pid)
			if p.pgrp == pgid {
				queue = append(queue, p.pid)
			}
		}
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			if !seen[pid] {
				seen[pid], grew = true, true
				_ = syscall.Kill(pid, syscall.SIGSTOP)
			}
			for _, c := range children[pid] {
				if !seen[c] {
					queue = append(queue, c)
				}
			}
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = proc.Kill()
	for pid := range seen {
		if pid != proc.Pid {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

type procInfo struct{ pid, ppid, pgrp int }

// listProcs reads every process's parent and group from /proc.
func listProcs() []procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	procs := make([]procInfo, 0, len(names))
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 3 {
			continue
		}
		ppid, err1 := strconv.Atoi(string(f[1]))
		pgrp, err2 := strconv.Atoi(string(f[2]))
		if err1 == nil && err2 == nil {
			procs = append(procs, procInfo{pid, ppid, pgrp})
		}
	}
	return procs
}
