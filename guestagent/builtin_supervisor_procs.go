//go:build linux

package guestagent

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// procStat is what the supervisor reads of a live process.
type procStat struct {
	ppid, pgrp, sid int
	start           uint64 // clock ticks since boot: with the pid, names it
	exiting         bool   // it has begun to exit (PF_EXITING)
	stopped         bool   // stopped by a signal or a tracer (T, t)
}

// pfExiting is the kernel's PF_EXITING, in a /proc/PID/stat's flags.
const pfExiting = 0x4

// procTable is every live process (zombies left out) by pid.
type procTable map[int]procStat

// scanProcs reads every process's parent, group, session and start time.
func scanProcs() procTable {
	ps := procTable{}
	d, err := os.Open("/proc")
	if err != nil {
		return ps
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		if st, ok := readStat(pid); ok {
			ps[pid] = st
		}
	}
	return ps
}

// readProc reads a small /proc file with four system calls: os.ReadFile
// takes about twice as many (its poller's), and the agent reads one per
// thread and per child several times a call.
func readProc(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var buf [4096]byte
	var out []byte
	for {
		n, err := unix.Read(fd, buf[:])
		switch {
		case err == unix.EINTR:
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return out, nil
		default:
			out = append(out, buf[:n]...)
		}
	}
}

// readStat reads a live process's stat; false for a zombie or none.
func readStat(pid int) (procStat, bool) {
	b, err := readProc("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseStat(b)
}

// parseStat reads a /proc/PID/stat line; false for a zombie or a line
// that is not one.
func parseStat(b []byte) (procStat, bool) {
	// pid (comm) state ppid pgrp session tty_nr tpgid flags ... starttime
	// (the 22nd field); comm may hold spaces and parens.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	sid, err3 := strconv.Atoi(f[3])
	flags, err4 := strconv.ParseUint(f[6], 10, 64)
	start, err5 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
		return procStat{}, false
	}
	return procStat{ppid, pgrp, sid, start, flags&pfExiting != 0, f[0] == "T" || f[0] == "t"}, true
}

func procStart(pid int) uint64 {
	st, _ := readStat(pid)
	return st.start
}

// tree is the live processes at and below roots, with their start times.
// It never takes init or the agent itself.
func tree(ps procTable, roots []int) map[int]uint64 {
	children := map[int][]int{}
	for pid, p := range ps {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	found := map[int]uint64{}
	self := os.Getpid()
	for q := roots; len(q) > 0; {
		pid := q[0]
		q = q[1:]
		p, live := ps[pid]
		if pid == 1 || pid == self || !live {
			continue
		}
		if _, ok := found[pid]; ok {
			continue
		}
		found[pid] = p.start
		q = append(q, children[pid]...)
	}
	return found
}

// commandPid is the command's pid while it names the command, else 0.
func (s *supervision) commandPid(ps procTable) int {
	if s.cmd == nil {
		return 0
	}
	if p, ok := ps[s.cmd.Process.Pid]; ok && p.start == s.start {
		return s.cmd.Process.Pid
	}
	return 0
}

// roots are the command, every recorded process still alive, and the
// orphans the agent adopted for this call.
func (s *supervision) roots(ps procTable) []int {
	var r []int
	if pid := s.commandPid(ps); pid != 0 {
		r = append(r, pid)
	}
	for pid, start := range s.seen {
		if p, ok := ps[pid]; ok && p.start == start {
			r = append(r, pid)
		}
	}
	return append(r, s.adoptedBy(ps)...)
}

// track records the command's processes.
func (s *supervision) track() {
	ps := scanProcs()
	s.seen = tree(ps, s.roots(ps))
}

// adoptedBy lists the agent's adopted children (those os/exec did not
// start) that count for this call: started once its command had, adopted
// after it started, and
// tagged with its id, or untagged and not in the session or group of
// another call in flight's command. One tagged with another call's id is
// that call's, even ended: the agent serves other calls, whose orphans it
// adopts too, and keeps those of ended calls.
func (s *supervision) adoptedBy(ps procTable) []int {
	if !s.reaper || s.start == 0 {
		return nil
	}
	kids := reapAndListAdopted()
	if len(kids) == 0 {
		return nil
	}
	var others []*supervision
	inFlight.Lock()
	for o := range inFlight.calls {
		if o != s && o.start != 0 {
			others = append(others, o)
		}
	}
	inFlight.Unlock()
	var mine []int
	for _, pid := range kids {
		p, ok := ps[pid]
		// Start times count clock ticks: an orphan held before the
		// command started can share its tick.
		if before, held := s.adoptedBefore[pid]; !ok || p.start < s.began || (held && before == p.start) {
			continue
		}
		if tag, tagged := ownerTag(pid); tagged {
			// Another call's, ended or not: an earlier call's daemon
			// may double-fork while this one runs.
			if tag == s.args.id {
				mine = append(mine, pid)
			}
			continue
		}
		claimed := false
		for _, o := range others {
			opid := o.cmd.Process.Pid
			if p.sid == opid || p.pgrp == opid {
				claimed = true
			}
		}
		if !claimed {
			mine = append(mine, pid)
		}
	}
	return mine
}

// execWait bounds how long ownerTag waits for a process caught mid-exec
// to have its new image; envWait, how long it waits for the environment
// of one that has its arguments.
const (
	execWait = 50 * time.Millisecond
	envWait  = 5 * time.Millisecond
)

// ownerTag reads a process's bashproto.OwnerEnv. A process with no
// environment to read may be between an exec's switch to its new memory
// and the setting up of its arguments and then its environment (an
// orphan's usual moment of adoption, a background command's at its call's
// end): with no arguments either, its environment is read again up to
// execWait; with arguments, which the kernel sets up first, up to envWait
// (a process whose environment is empty costs no more than that); only
// then it is taken as it is.
func ownerTag(pid int) (string, bool) {
	proc := "/proc/" + strconv.Itoa(pid)
	var withArgs time.Duration
	for waited := time.Duration(0); ; waited += time.Millisecond {
		env, err := os.ReadFile(proc + "/environ")
		if err != nil {
			return "", false
		}
		if len(env) > 0 || waited >= execWait || withArgs >= envWait {
			return ownerIn(env)
		}
		args, err := os.ReadFile(proc + "/cmdline")
		if err != nil {
			return ownerIn(env)
		}
		if len(args) > 0 {
			withArgs += time.Millisecond
		}
		time.Sleep(time.Millisecond)
	}
}

// ownerIn finds the owner tag in a process's environment env.
func ownerIn(env []byte) (string, bool) {
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(bashproto.OwnerEnv+"=")); ok {
			return string(v), true
		}
	}
	return "", false
}

// tagged lists the processes whose environment tags them with call id.
func tagged(id string) []int { return taggedWith(bashproto.OwnerEnv + "=" + id) }

// taggedWith lists the processes, but this one, whose environment holds
// entry (NAME=VALUE).
func taggedWith(entry string) []int {
	want := []byte("\x00" + entry + "\x00")
	self := os.Getpid()
	var pids []int
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 1 || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + name + "/environ")
		if err == nil && bytes.Contains(append([]byte{0}, env...), want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killTree stops every process it can attribute to the command, again
// until no new one appears (so none forks away between a scan and the
// kill), then kills them all: the tree below the command, below every
// recorded process and below the orphans adopted for the call, the
// command's session and group, and every process tagged with the call's
// id. It waits, a second at most, for them to be gone, so that none is
// taken for a background process at the end.
func (s *supervision) killTree() {
	stopped := map[int]uint64{}
	signal := func(pid int, start uint64, sig syscall.Signal) {
		if s.cmd != nil && pid == s.cmd.Process.Pid {
			_ = s.cmd.Process.Signal(sig) // through its pidfd: never a reused pid
			return
		}
		signalSame(pid, start, sig)
	}
	for range 20 {
		ps := scanProcs()
		roots := s.roots(ps)
		if cmd := s.commandPid(ps); cmd != 0 {
			for pid, p := range ps {
				if p.pgrp == cmd || p.sid == cmd {
					roots = append(roots, pid)
				}
			}
		}
		roots = append(roots, tagged(s.args.id)...)
		n := 0
		for pid, start := range tree(ps, roots) {
			if _, ok := stopped[pid]; !ok {
				signal(pid, start, syscall.SIGSTOP)
				stopped[pid] = start
				n++
			}
		}
		if n == 0 {
			break
		}
	}
	for pid, start := range stopped {
		signal(pid, start, syscall.SIGKILL)
	}
	for range 100 {
		if s.reaper {
			reapAdopted()
		}
		alive := false
		for pid, start := range stopped {
			if st, ok := readStat(pid); ok && st.start == start {
				alive = true
				break
			}
		}
		if !alive {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// signalSame sends sig to pid only while pid names the process that
// started at start (as a scan found it): the pidfd is opened first, so the
// process whose start time is checked is the one signalled, and a process
// that took a dead one's pid since the scan is left alone. Without pidfds
// the check still narrows the window to between the read and the kill.
func signalSame(pid int, start uint64, sig syscall.Signal) {
	if pid <= 1 || pid == os.Getpid() {
		return
	}
	if !pidfdsWork() {
		if st, ok := readStat(pid); ok && st.start == start {
			_ = syscall.Kill(pid, sig)
		}
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if st, ok := readStat(pid); ok && st.start == start {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
}

// inFlight are the supervisors running in this agent.
var inFlight = struct {
	sync.Mutex
	calls map[*supervision]struct{}
}{calls: map[*supervision]struct{}{}}

func register(s *supervision) {
	inFlight.Lock()
	defer inFlight.Unlock()
	inFlight.calls[s] = struct{}{}
}

func unregister(s *supervision) {
	inFlight.Lock()
	defer inFlight.Unlock()
	delete(inFlight.calls, s)
}

// supervisorsOf lists the supervisors in flight of call id.
func supervisorsOf(id string) []*supervision {
	inFlight.Lock()
	defer inFlight.Unlock()
	var sups []*supervision
	for s := range inFlight.calls {
		if s.args.id == id {
			sups = append(sups, s)
		}
	}
	return sups
}

// The agent is a child subreaper while a supervisor runs: a process that double-forks out of a command's tree is
// reparented to the agent instead of init, and a kill or the end of the
// call finds it. Orphans it adopts are reaped by the supervisors (each
// tick, and before a command starts); one that ends while no supervisor
// runs stays a zombie until the next one starts.
var subreaper struct {
	sync.Mutex
	calls int
}

// pidfdsWork tells whether os/exec holds a pidfd for each child it starts
// (Linux 5.4 and later): that is how the agent tells an adopted orphan,
// which it may reap, from a child os/exec will wait for.
var pidfdsWork = sync.OnceValue(func() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// enterSubreaper makes the agent a child subreaper for one more call;
// false when it cannot be one (then nothing is adopted).
func enterSubreaper() bool {
	if !pidfdsWork() {
		return false
	}
	subreaper.Lock()
	defer subreaper.Unlock()
	if subreaper.calls == 0 && unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != nil {
		return false
	}
	subreaper.calls++
	return true
}

func leaveSubreaper() {
	subreaper.Lock()
	defer subreaper.Unlock()
	if subreaper.calls--; subreaper.calls == 0 {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	}
}

// taskChildren is the file listing a thread's children; a variable so
// that the tests can take it away, as a kernel without PROC_CHILDREN does.
var taskChildren = func(pid int, task string) string {
	return "/proc/" + strconv.Itoa(pid) + "/task/" + task + "/children"
}

// children lists the agent's children, zombies included, and, when
// commands have a pid namespace of their own, the orphans its init
// adopted, which are the agent's as much. Without the kernel's children
// lists (CONFIG_PROC_CHILDREN) it scans /proc for them.
func children() []int {
	pids := childrenOf(os.Getpid())
	if commandsNS != nil {
		pids = append(pids, childrenOf(commandsNS.init.Process.Pid)...)
	}
	return pids
}

func childrenOf(parent int) []int {
	d, err := os.Open("/proc/" + strconv.Itoa(parent) + "/task")
	if err != nil {
		return nil
	}
	defer d.Close()
	tasks, _ := d.Readdirnames(-1)
	var pids []int
	for _, t := range tasks {
		b, err := readProc(taskChildren(parent, t))
		if errors.Is(err, fs.ErrNotExist) && t == strconv.Itoa(parent) {
			return childrenByScan(parent)
		}
		if err != nil {
			continue
		}
		for f := range strings.FieldsSeq(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// childrenByScan lists the processes whose parent is parent, zombies
// included, from every process's stat.
func childrenByScan(parent int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 1 {
			continue
		}
		b, err := readProc("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(b[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(parent) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// startedHere lists the pids of the processes the agent holds a pidfd
// for: the children os/exec started and has not reaped yet. os/exec
// creates each one's pidfd with the process, before it first runs.
func startedHere() map[int]bool {
	pids := map[int]bool{}
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return pids
	}
	defer d.Close()
	fds, _ := d.Readdirnames(-1)
	for _, fd := range fds {
		if link, err := os.Readlink("/proc/self/fd/" + fd); err != nil || link != "anon_inode:[pidfd]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + fd)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(info)) {
			if v, ok := strings.CutPrefix(line, "Pid:"); ok {
				if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					pids[pid] = true
				}
			}
		}
	}
	return pids
}

// reapAndListAdopted reaps the adopted orphans that have ended, as
// reapAdopted, and lists the live ones, from one look at the children.
func reapAndListAdopted() []int {
	kids := children()
	if len(kids) == 0 {
		return nil
	}
	mine := startedHere()
	var adopted []int
	for _, pid := range kids {
		if mine[pid] {
			continue
		}
		if _, live := readStat(pid); live {
			adopted = append(adopted, pid)
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
	return adopted
}

// reapAdopted reaps the adopted orphans that have ended; never a child
// os/exec started, which its Wait reaps. A zombie holds its pid, so the
// one waited for is the one found.
func reapAdopted() {
	var zombies []int
	for _, pid := range children() {
		if _, live := readStat(pid); !live {
			zombies = append(zombies, pid)
		}
	}
	if len(zombies) == 0 {
		return
	}
	mine := startedHere()
	for _, pid := range zombies {
		if !mine[pid] {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}
