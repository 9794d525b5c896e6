//go:build linux

package guestagent

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// Exit statuses of a supervisor that never started the command.
const (
	exitMalformedRequest = 91
	exitNoLog            = 92
)

// Intervals of the supervisor: the log is relayed every relayPoll while
// the command runs (its end is relayed at once), and its processes are
// recorded every trackEvery.
const (
	relayPoll  = 10 * time.Millisecond
	trackEvery = 100 * time.Millisecond
)

// supervisorArgs are the supervisor's arguments (bashproto.Args).
type supervisorArgs struct {
	id, logdir, keptdir string
	secs                int64
	maxLines, maxBytes  int64
	endBackground       bool
}

// isHexID reports whether s is a call id or secret: lowercase hex digits,
// at least one. (Not a regexp: the agent links none, to start faster;
// cmd/oma-guest-agent's TestLinksNoRegexp.)
func isHexID(s string) bool { return s != "" && strings.Trim(s, "0123456789abcdef") == "" }

func parseSupervisorArgs(args []string) (supervisorArgs, error) {
	var a supervisorArgs
	if len(args) != 7 {
		return a, fmt.Errorf("%d arguments, want 7", len(args))
	}
	a.id, a.logdir, a.keptdir = args[0], args[2], args[3]
	if !isHexID(a.id) {
		return a, fmt.Errorf("bad call id %q", a.id)
	}
	nums := []*int64{&a.secs, &a.maxLines, &a.maxBytes}
	for i, s := range []string{args[1], args[4], args[5]} {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return a, fmt.Errorf("bad number %q", s)
		}
		*nums[i] = n
	}
	// Beyond this, the timer's duration would wrap negative and fire at once.
	if a.secs > math.MaxInt64/int64(time.Second) {
		return a, fmt.Errorf("timeout %d seconds is out of range", a.secs)
	}
	switch args[6] {
	case "keep":
	case "end":
		a.endBackground = true
	default:
		return a, fmt.Errorf("bad background mode %q", args[6])
	}
	return a, nil
}

// bashSupervisor runs a bash tool call's command (see bashproto.Args for
// its arguments, stdin and output), with no process but the command's
// bash. It reads the secret (one line) and the command (the rest) from
// stdin, creates the log, prints the dispatch line and starts the command
// as the leader of its own session, its output appended to the log, which
// it relays as it grows. It records the command's process tree every
// trackEvery (pids with their start times, so a reused pid is never taken
// for one of ours); on the timeout, or when a bash-kill call or a kill
// frame asks, it stops every process it can attribute to the command,
// again until no new one appears, then SIGKILLs them. After a normal end
// nothing is killed, unless the call ends background processes. It copies
// a log beyond the limits to the kept directory and prints the terminal
// record. The agent serves other calls too: the orphans it adopts as a
// child subreaper count for a call only when they started during it (see
// adoptedBy).
func bashSupervisor(c *builtinCall) int {
	a, err := parseSupervisorArgs(c.Args)
	if err != nil {
		fmt.Fprintf(c.Stderr, "oma-sandbox: malformed bash request: %v\n", err)
		return exitMalformedRequest
	}
	in, ok := readAll(c.Stdin, c.Killed)
	if !ok {
		return bashproto.TimeoutExitCode
	}
	secret, command, _ := strings.Cut(string(in), "\n")
	// What follows a NUL, which no command holds, is the id of the
	// caller's next call, or ignored (bashproto.Call.Next).
	command, next, _ := strings.Cut(command, "\x00")
	if !isHexID(secret) {
		fmt.Fprintf(c.Stderr, "oma-sandbox: malformed bash request\n")
		return exitMalformedRequest
	}
	s := &supervision{call: c, args: a, secret: secret, abort: make(chan struct{}), done: make(chan struct{})}
	s.logPath = a.logdir + "/" + a.id + ".log"
	if s.standby = takeStandby(s); s.standby != nil {
		s.log, s.logReader = s.standby.log, s.standby.logReader
	} else if s.log, s.logReader, err = createLog(c.User, a.logdir, s.logPath); err != nil {
		fmt.Fprintf(c.Stderr, "oma-sandbox: cannot create the output log %s\n", s.logPath)
		return exitNoLog
	}
	defer s.log.Close()
	defer s.logReader.Close()
	s.out([]byte("__OMA_DISPATCHED__:" + secret + "\n"))
	status := s.run(command)
	if isHexID(next) && next != a.id {
		standBy(c, a, next)
	}
	return status
}

// readAll reads r to its end, or gives up when killed closes: a host that
// never ends stdin cannot hold the call (the abandoned reader then ends).
// A kill abandons stdin, which then reads as ended: what was read by then
// is never taken for the whole request.
func readAll(r io.Reader, killed <-chan struct{}) ([]byte, bool) {
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- b
	}()
	var in []byte
	select {
	case in = <-got:
	case <-killed:
		return nil, false
	}
	select {
	case <-killed:
		return nil, false
	default:
		return in, true
	}
}

// supervision is one run of the supervisor.
type supervision struct {
	call    *builtinCall
	args    supervisorArgs
	secret  string
	logPath string
	// log is the file created for the output, the command's stdout and
	// stderr; logReader reads that very file (never its path again).
	log, logReader *os.File

	cmd   *exec.Cmd
	start uint64 // the command's start time, in clock ticks since boot
	// began is when the command was given its text: its start, or the
	// hand-off to a standby started before the call.
	began   uint64
	standby *standby // the call's log and bash (if it fits), started ahead

	// abort closes when a bash-kill call asks this supervisor to kill
	// (or a kill frame does); done closes when it has ended.
	abort     chan struct{}
	abortOnce sync.Once
	done      chan struct{}

	relayed, lines int64       // bytes and newlines relayed
	buf            []byte      // the relay's
	cut            atomic.Bool // the command was killed: relay no more
	dead           bool        // stdout failed: write no more
	seen           map[int]uint64
	reaper         bool // the agent is a child subreaper for this call
	// adoptedBefore are the orphans the agent held when this call's
	// command started (pid to start time): never this call's, even one
	// that started in the same clock tick as the command.
	adoptedBefore map[int]uint64
}

func (s *supervision) stop() { s.abortOnce.Do(func() { close(s.abort) }) }

// createLog makes the log directory logdir (mode 700, parents as mkdir -p
// does) and the log at path, as user: O_EXCL, so neither a symlink nor a
// FIFO planted at the log's name is followed or opened. With no path, the
// log has no name until nameLog gives it one. It returns the log open for
// appending and for reading.
func createLog(user identity, logdir, path string) (w, r *os.File, err error) {
	err = asUser(user, func() error {
		if !mkdirs(logdir, 0o700) {
			return errors.New("no log directory")
		}
		name, flags := path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_APPEND
		if path == "" {
			name, flags = logdir, unix.O_WRONLY|unix.O_TMPFILE|unix.O_APPEND
		}
		if w, err = openFile(name, flags, 0o666); err != nil {
			return err
		}
		if r, err = openFile("/proc/self/fd/"+strconv.Itoa(int(w.Fd())), unix.O_RDONLY, 0); err != nil {
			w.Close()
			return err
		}
		return nil
	})
	return w, r, err
}

// nameLog names w, a log createLog made without a name, path, as user:
// an existing name, a symlink or a FIFO planted there among them, is
// neither replaced nor followed.
func nameLog(user identity, logdir string, w *os.File, path string) error {
	return asUser(user, func() error {
		if !mkdirs(logdir, 0o700) {
			return errors.New("no log directory")
		}
		return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(w.Fd())), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	})
}

func openFile(path string, flags int, mode uint32) (*os.File, error) {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// mkdirs makes dir and its missing parents: parents with mode 777, dir
// with mode (both less the umask); an existing directory, or a symlink to
// one, is fine.
func mkdirs(dir string, mode uint32) bool {
	var st unix.Stat_t
	if unix.Stat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return true
	}
	if up := parentDir(dir); up != "" {
		mkdirs(up, 0o777)
	}
	if unix.Mkdir(dir, mode) == nil {
		return true
	}
	return unix.Stat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// parentDir is dir without its last component, or "" when it has none to
// make (a single component, or a child of /).
func parentDir(dir string) string {
	d := strings.TrimRight(dir, "/")
	i := strings.LastIndexByte(d, '/')
	if i < 0 {
		return ""
	}
	return strings.TrimRight(d[:i], "/")
}

// out writes a line of the supervisor's own to stdout.
func (s *supervision) out(b []byte) {
	if !s.dead {
		if _, err := s.call.Stdout.Write(b); err != nil {
			s.dead = true
		}
	}
}

// run starts the command and supervises it to the end; it returns the
// supervisor's exit status.
func (s *supervision) run(command string) int {
	s.reaper = enterSubreaper()
	if s.reaper {
		defer leaveSubreaper()
		s.adoptedBefore = map[int]uint64{}
		for _, pid := range reapAndListAdopted() {
			s.adoptedBefore[pid] = procStart(pid)
		}
	}
	register(s)
	defer func() {
		unregister(s)
		close(s.done)
	}()

	kind, status := "exit", bashproto.TimeoutExitCode
	exited := make(chan struct{})
	if s.killed() {
		// Killed before the command started (a kill frame that came
		// first): nothing is started, as if it were killed at once.
		if s.standby != nil && s.standby.cmd != nil {
			s.standby.endBash()
		}
		close(exited)
	} else if err := s.startCommand(command, exited); err != nil {
		// Said in the log, where the command's own words would be.
		fmt.Fprintf(s.log, "oma-sandbox: cannot run /bin/bash: %v\n", err)
		close(exited)
		status = 127
	}

	relayStop, relayDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(relayDone)
		s.relayLoop(relayStop)
	}()
	timer := time.NewTimer(time.Duration(max(s.args.secs, 1)) * time.Second)
	defer timer.Stop()
	track := time.NewTicker(trackEvery)
	defer track.Stop()
loop:
	for {
		select {
		case <-exited:
			break loop
		case <-s.call.Killed:
		case <-s.abort:
		case <-timer.C:
			kind = "timeout"
		case <-track.C:
			s.track()
			if s.reaper {
				reapAdopted()
			}
			continue
		}
		select {
		case <-exited: // it ended first: its status stands
			kind = "exit"
		default:
			s.cut.Store(true)
			s.killTree()
		}
		break loop
	}
	<-exited
	if s.cmd != nil {
		status = waitStatus(s.cmd.ProcessState)
	}
	close(relayStop)
	<-relayDone
	// What the log holds now, the command having ended; what background
	// processes add later is theirs.
	s.relay()

	if s.lines+1 > s.args.maxLines || s.relayed > s.args.maxBytes {
		s.keep()
	}
	// Background processes are looked for only when the agent has
	// adopted a child: with none at all, a call that left nothing scans
	// nothing.
	if !s.reaper || len(reapAndListAdopted()) > 0 {
		s.track()
	} else {
		s.seen = nil
	}
	switch {
	case len(s.seen) > 0 && s.args.endBackground:
		s.killTree()
		s.out([]byte("\n[Background processes were killed: on this sandbox nothing outlives the call]\n"))
		s.removeLog()
	case len(s.seen) > 0:
		s.out([]byte("\n[Background processes are still running; their output goes to " + s.logPath + "]\n"))
	default:
		s.removeLog()
	}
	if kind == "timeout" {
		status = bashproto.TimeoutExitCode
	}
	s.out(fmt.Appendf(nil, "__OMA_TERMINAL__:%s:%s:%d\n", s.secret, kind, status))
	return status
}

func (s *supervision) killed() bool {
	select {
	case <-s.call.Killed:
		return true
	case <-s.abort:
		return true
	default:
		return false
	}
}

// waitStatus is the shell's $? for a process: 128 + a killing signal. A
// wait that failed (nothing else reaps the command) leaves 137.
func waitStatus(st *os.ProcessState) int {
	if st == nil {
		return bashproto.TimeoutExitCode
	}
	ws := st.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// startCommand starts the command's bash in its own session, as the
// call's user, in the workdir, with the command text on its stdin (it
// reads it all, then takes /dev/null), its stdout and stderr appended to
// the log and the call's id in its environment. exited closes once it has
// been waited for.
func (s *supervision) startCommand(command string, exited chan<- struct{}) error {
	if sb := s.standby; sb != nil && sb.cmd != nil {
		return s.handOff(sb, command, exited)
	}
	textR, textW, err := os.Pipe()
	if err != nil {
		return err
	}
	text := command + "\n"
	cmd := &exec.Cmd{
		Path:        "/bin/bash",
		Args:        bashproto.ReaderArgv(text),
		Stdin:       textR,
		Stdout:      s.log,
		Stderr:      s.log,
		SysProcAttr: s.call.ProcAttr(true),
	}
	// The command inherits the directory the agent entered for the call,
	// and the PWD a shell started there would see.
	err = startIn(cmd, s.call.Workdir, func() {
		cmd.Env = commandEnv(s.call.Env, shellPWD(s.call.Env), s.args.id)
	})
	textR.Close()
	if err != nil {
		textW.Close()
		return err
	}
	// Until it has its text, bash has started nothing.
	if err := moveToCommands(cmd.Process.Pid); err != nil {
		textW.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	start := procStart(cmd.Process.Pid)
	inFlight.Lock() // other supervisors read them
	s.cmd, s.start, s.began = cmd, start, start
	inFlight.Unlock()
	var feeding sync.WaitGroup
	feeding.Add(1)
	go func() {
		// A command that dies unread breaks the pipe: the write fails.
		defer feeding.Done()
		_, _ = io.WriteString(textW, text)
		textW.Close()
	}()
	go func() {
		_ = cmd.Wait()
		// A reader the guest opened through /proc/PID/fd/0 may hold the
		// pipe: once the command is gone, its text is no one's to read.
		textW.Close()
		feeding.Wait()
		close(exited)
	}()
	return nil
}

// shellPWD is what bash sets PWD to in the current directory: the
// inherited PWD when it names this directory, else its real path.
func shellPWD(env []string) string {
	var here, there unix.Stat_t
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PWD="); ok && strings.HasPrefix(p, "/") {
			if unix.Stat(".", &here) == nil && unix.Stat(p, &there) == nil && here.Dev == there.Dev && here.Ino == there.Ino {
				return p
			}
		}
	}
	wd, _ := unix.Getwd()
	return wd
}

// commandEnv is the environment the command gets: the agent's as a bash
// would pass it on (its PWD, SHLVL as bash leaves it after an exec), with
// the call's id as bashproto.OwnerEnv.
func commandEnv(base []string, pwd, id string) []string {
	env := make([]string, 0, len(base)+3)
	shlvl := "0"
	for _, kv := range base {
		name, val, _ := strings.Cut(kv, "=")
		switch name {
		case "PWD", bashproto.OwnerEnv:
			continue
		case "SHLVL":
			// bash adds one when it starts and takes it back when it execs.
			if n, err := strconv.Atoi(val); err == nil && n >= 0 && n < 999 {
				shlvl = strconv.Itoa(n)
			}
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PWD="+pwd, "SHLVL="+shlvl, bashproto.OwnerEnv+"="+id)
}

// relayLoop relays the log while the command runs, until stop closes.
func (s *supervision) relayLoop(stop <-chan struct{}) {
	poll := time.NewTicker(relayPoll)
	defer poll.Stop()
	for {
		s.relay()
		select {
		case <-stop:
			return
		case <-poll.C:
		}
	}
}

// relay copies the log to stdout up to its size now: a command that writes
// as fast as it is read cannot keep the supervisor from its other work.
// Once the command is killed nothing more is relayed.
func (s *supervision) relay() {
	var st unix.Stat_t
	if unix.Fstat(int(s.logReader.Fd()), &st) != nil {
		return
	}
	if s.relayed >= st.Size {
		return
	}
	if s.buf == nil {
		s.buf = make([]byte, 64<<10)
	}
	buf := s.buf
	// Once stdout fails (the call is past its output cap, or ending) no
	// more is relayed: what was, bounds the kept copy (keep).
	for !s.cut.Load() && !s.dead && s.relayed < st.Size {
		n, err := s.logReader.Read(buf[:min(int64(len(buf)), st.Size-s.relayed)])
		if n == 0 || err != nil {
			return
		}
		s.relayed += int64(n)
		s.lines += int64(strings.Count(string(buf[:n]), "\n"))
		if s.cut.Load() {
			return
		}
		s.out(buf[:n])
	}
}

// keep copies the log as it was relayed (every byte of it the host was
// sent) to the kept copy, as the call's user, or says it could not. What
// the log holds beyond that is not the call's: a background process that
// appends on and on, or a command that made the log sparse and huge,
// cannot hold the call in the copy or fill the workspace with it, the
// relayed bytes being bounded by the call's output cap. The copy is
// created exclusively, non-blocking: a FIFO or a symlink planted at its
// name fails it instead of being opened or followed.
func (s *supervision) keep() {
	kept := s.args.keptdir + "/" + s.args.id + ".log"
	err := asUser(s.call.User, func() error {
		if !mkdirs(s.args.keptdir, 0o777) {
			return errors.New("no directory")
		}
		k, err := openFile(kept, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NONBLOCK, 0o666)
		if err != nil {
			return err
		}
		defer k.Close()
		_, err = io.Copy(k, io.NewSectionReader(s.logReader, 0, s.relayed))
		return err
	})
	if err != nil {
		s.out([]byte("\n[The full output could not be saved to " + kept + "]\n"))
	}
}

// removeLog removes the log's path, as the call's user.
func (s *supervision) removeLog() {
	_ = asUser(s.call.User, func() error { return unix.Unlink(s.logPath) })
}
