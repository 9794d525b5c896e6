//go:build linux

package guestagent

import (
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// A standby is the bash of a call that has not come yet, started ahead:
// loading and starting bash is most of a short command's time. A call that
// names the id its caller will give its next call (bashproto.Call.Next)
// has the agent start that call's bash as this one ends, as the supervisor
// starts a command's (as the call's user, in its workdir, in a session of
// its own, tagged with the next id, its output to the next call's log,
// created then without a name and named when the call comes), but parked
// on a read of its stdin (bashproto.StandbyReader). The next call with
// that id, user, workdir and log directory hands it the command; any other
// starts its own bash. A standby is ended unused after standbyLinger, when
// the host asks (standby-end: before it judges the sandbox idle), or with
// the agent. It is the guest's like the command it will run: a guest that
// kills it only makes its next call start its own bash.

// standbyLinger is how long a standby waits for its call.
var standbyLinger = time.Minute

// maxStandbys bounds the standbys of an agent.
const maxStandbys = 8

// standbys are the standbys by call id. Only an agent that serves a local
// session's resident sandbox (Main's serve --listen-fd) starts them: one
// that runs a single builtin has no next call, and on msb's channel they
// were measured only under software emulation, where they cost more than
// they saved.
var standbys = struct {
	sync.Mutex
	on   bool
	byID map[string]*standby
}{byID: map[string]*standby{}}

// enableStandbys lets the bash supervisor start standbys.
func enableStandbys() {
	standbys.Lock()
	defer standbys.Unlock()
	standbys.on = true
}

// standby is one started bash and what it was started for.
type standby struct {
	ready chan struct{} // closed once started, or failed (err)
	err   error

	id, logdir, workdir string
	user                identity
	cred                *syscall.Credential
	dir                 unix.Stat_t // the workdir it runs in

	cmd            *exec.Cmd
	start          uint64   // its start time, in clock ticks since boot
	text           *os.File // its stdin
	log, logReader *os.File
	exited         chan struct{} // closed once it has been waited for
	linger         *time.Timer
}

// standBy starts the bash of call next, as c's command's would be, unless
// standbys are off or at their bound, next already has one, or the agent
// runs another call than c's: starting a bash must not take the CPU from a
// call that runs (on a small or emulated machine, a good part of a
// second).
func standBy(c *builtinCall, a supervisorArgs, next string) {
	standbys.Lock()
	defer standbys.Unlock()
	if !standbys.on || len(standbys.byID) >= maxStandbys || standbys.byID[next] != nil || callsRunning.Load() > 1 {
		return
	}
	sb := &standby{ready: make(chan struct{}), id: next, logdir: a.logdir, workdir: c.Workdir, user: c.User, cred: c.Cred}
	standbys.byID[next] = sb
	go func() {
		defer close(sb.ready)
		sb.err = sb.startBash(c)
		if sb.err != nil {
			dropStandby(sb)
			return
		}
		sb.linger = time.AfterFunc(standbyLinger, func() { dropStandby(sb) })
	}()
}

// startBash starts the standby's bash, its log created first.
func (sb *standby) startBash(c *builtinCall) error {
	log, logReader, err := createLog(c.User, sb.logdir, "")
	if err != nil {
		return err
	}
	textR, textW, err := os.Pipe()
	if err != nil {
		log.Close()
		logReader.Close()
		return err
	}
	argv := bashproto.StandbyArgv()
	cmd := &exec.Cmd{Path: argv[0], Args: argv, Stdin: textR, Stdout: log, Stderr: log, SysProcAttr: c.ProcAttr(true)}
	err = startIn(cmd, c.Workdir, func() {
		_ = unix.Stat(".", &sb.dir)
		cmd.Env = commandEnv(c.Env, shellPWD(c.Env), sb.id)
	})
	textR.Close()
	if err != nil {
		textW.Close()
		log.Close()
		logReader.Close()
		return err
	}
	sb.cmd, sb.start, sb.text, sb.log, sb.logReader = cmd, procStart(cmd.Process.Pid), textW, log, logReader
	sb.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(sb.exited)
	}()
	return nil
}

// takeStandby takes the standby of the call s supervises, if it has one
// for the call's user and log directory: its log, named now, is the
// call's, and its bash too if it fits, having the same workdir (the path,
// and the directory it names now) and still waiting. A bash that does not
// fit is ended (cmd nil): the call starts its own.
func takeStandby(s *supervision) *standby {
	standbys.Lock()
	sb := standbys.byID[s.args.id]
	delete(standbys.byID, s.args.id)
	standbys.Unlock()
	if sb == nil {
		return nil
	}
	<-sb.ready
	if sb.err != nil {
		return nil
	}
	sb.linger.Stop() // taken from the map, it is this call's to use or end
	if sb.logdir != s.args.logdir || sb.user != s.call.User || nameLog(sb.user, sb.logdir, sb.log, s.logPath) != nil {
		sb.end()
		return nil
	}
	var dir unix.Stat_t
	fits := sameCred(sb.cred, s.call.Cred) && sb.workdir == s.call.Workdir &&
		unix.Stat(s.call.Workdir, &dir) == nil && dir.Dev == sb.dir.Dev && dir.Ino == sb.dir.Ino
	if !fits || !stillWaiting(sb.cmd.Process.Pid) {
		sb.endBash()
	}
	return sb
}

// stillWaiting reports whether a standby's bash is alive and undisturbed:
// no signal pending, not exiting, not stopped. Read in that order, a
// signal sent before the call came (by a guest process) is seen as pending
// or as its effect, and the call starts its own bash.
func stillWaiting(pid int) bool {
	status, err := readProc("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(status)) {
		name, mask, _ := strings.Cut(line, ":")
		if (name == "SigPnd" || name == "ShdPnd") && strings.Trim(mask, "0\t\n ") != "" {
			return false
		}
	}
	st, live := readStat(pid)
	return live && !st.exiting && !st.stopped
}

func sameCred(a, b *syscall.Credential) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Uid == b.Uid && a.Gid == b.Gid && a.NoSetGroups == b.NoSetGroups && slices.Equal(a.Groups, b.Groups)
}

// dropStandby ends sb unless a call has taken it.
func dropStandby(sb *standby) {
	standbys.Lock()
	mine := standbys.byID[sb.id] == sb
	if mine {
		delete(standbys.byID, sb.id)
	}
	standbys.Unlock()
	if mine && sb.err == nil {
		sb.linger.Stop()
		sb.end()
	}
}

// end ends the standby's bash and closes its log, which no name reaches.
func (sb *standby) end() {
	sb.endBash()
	sb.log.Close()
	sb.logReader.Close()
}

// endBash kills the standby's bash, which has started nothing, and waits
// for it.
func (sb *standby) endBash() {
	_ = sb.cmd.Process.Kill()
	<-sb.exited
	sb.text.Close()
	sb.cmd = nil
}

// endStandbys ends every standby: what standby-end does.
func endStandbys() {
	standbys.Lock()
	all := make([]*standby, 0, len(standbys.byID))
	for _, sb := range standbys.byID {
		all = append(all, sb)
	}
	standbys.Unlock()
	for _, sb := range all {
		<-sb.ready
		dropStandby(sb)
	}
}

// standbyEnd is the standby-end builtin: it ends the agent's standbys, so
// that the host can tell whether anything of the guest's still runs.
func standbyEnd(*builtinCall) int {
	endStandbys()
	return 0
}

// handOff gives the standby's bash the command, as startCommand gives a
// bash it starts. exited closes once the bash has been waited for.
func (s *supervision) handOff(sb *standby, command string, exited chan<- struct{}) error {
	if err := moveToCommands(sb.cmd.Process.Pid); err != nil {
		sb.endBash()
		return err
	}
	inFlight.Lock() // other supervisors read them
	s.cmd, s.start, s.began = sb.cmd, sb.start, bootTicks(sb.start)
	inFlight.Unlock()
	text := command + "\n"
	var feeding sync.WaitGroup
	feeding.Add(1)
	go func() {
		defer feeding.Done()
		_, _ = io.WriteString(sb.text, strconv.Itoa(len(text))+"\n"+text)
		sb.text.Close()
	}()
	go func() {
		<-sb.exited
		// As startCommand's: a reader the guest opened may hold the pipe.
		sb.text.Close()
		feeding.Wait()
		close(exited)
	}()
	return nil
}

// bootTicks is the time since boot in the clock ticks of a process's
// start time in /proc (USER_HZ, 100 a second), or else when the clock
// cannot be read.
func bootTicks(orElse uint64) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return orElse
	}
	return uint64(ts.Sec)*100 + uint64(ts.Nsec)/10_000_000
}
