//go:build linux

package guestagent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// A builtin is one piece of the tools' guest work done inside the agent:
// it takes a call's arguments and stdin and answers with output and an
// exit status, as a script run by `bash -c SCRIPT bash ARGS...` would,
// without starting a shell for it. The tools name only builtins (package
// agentwire lists them; the packages that build their arguments say what
// each does).
type builtin func(c *builtinCall) int

// revision is the one the hello announces, and `builtin --revision=N`
// compares: this build's.
var revision = agentwire.Revision

// knowsRevisionOption is false only in a build standing in for an agent
// from before revisions (the tag oma_older_agent).
var knowsRevisionOption = true

// builtins are the names the hello offers, each with its implementation.
var builtins = map[string]builtin{
	agentwire.BuiltinWrite:          builtinWrite,
	agentwire.BuiltinCat:            builtinCat,
	agentwire.BuiltinGlobEnumerate:  globEnumerate,
	agentwire.BuiltinGrepSearch:     grepSearch,
	agentwire.BuiltinSearchKill:     searchKill,
	agentwire.BuiltinBashSupervisor: bashSupervisor,
	agentwire.BuiltinBashKill:       bashKill,
	agentwire.BuiltinStandbyEnd:     standbyEnd,
	agentwire.BuiltinRead:           builtinRead,
	agentwire.BuiltinLs:             builtinLs,
	agentwire.BuiltinOutputsList:    outputsList,
	agentwire.BuiltinOutputsFetch:   outputsFetch,
	agentwire.BuiltinExtract:        extract,
	agentwire.BuiltinPrepare:        prepare,
	agentwire.BuiltinGrepPreflight:  grepPreflight,
}

// BuiltinNames lists the builtins this agent offers, sorted.
func BuiltinNames() []string {
	names := make([]string, 0, len(builtins))
	for name := range builtins {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// builtinCall is what a builtin is given.
type builtinCall struct {
	Args   []string
	Stdin  io.Reader // the call's stdin: empty when the run has none
	Stdout io.Writer // sent as out frames and counted against the call's cap;
	Stderr io.Writer // a write fails once the call is ending
	// User is the call's user. File work is done as that user through
	// asUser; a process the builtin starts runs as Cred (nil: as the agent).
	User    identity
	Cred    *syscall.Credential
	Workdir string   // the call's workdir, not entered: cmd.Dir or asUser
	Env     []string // the environment of the processes it starts
	// Killed closes when the call must end: a kill frame, the guest timer,
	// the output cap, SIGTERM to `oma-guest-agent builtin`. A builtin that started processes kills their trees
	// (killTree) and returns.
	Killed <-chan struct{}
}

// ProcAttr is the SysProcAttr of a process the builtin starts: its own
// process group (setsid when session), the call's user, and death with the
// agent.
func (c *builtinCall) ProcAttr(session bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: !session, Setsid: session, Pdeathsig: syscall.SIGKILL, Credential: c.Cred}
}

// ending reports that the call must end.
func (c *builtinCall) ending() bool {
	select {
	case <-c.Killed:
		return true
	default:
		return false
	}
}

// userPath is p as the call's processes see it: relative to the workdir.
func (c *builtinCall) userPath(p string) string {
	if p == "" || p[0] == '/' {
		return p
	}
	return c.Workdir + "/" + p
}

// runBuiltin runs the call's builtin with the call's stdin and output.
func (p *proc) runBuiltin(fn builtin, id identity, cred *syscall.Credential, dir string) *agentwire.Exit {
	var stdin io.Reader = eofReader{}
	if p.run.Stdin {
		stdin = &queueReader{p: p}
	}
	args := make([]string, len(p.run.Args))
	for i, a := range p.run.Args {
		args[i] = string(a)
	}
	c := &builtinCall{
		Args: args, Stdin: stdin,
		Stdout: outWriter{p, 1}, Stderr: outWriter{p, 2},
		User: id, Cred: cred, Workdir: dir, Env: os.Environ(),
		Killed: p.killed,
	}
	// A kill ends a wait for stdin as it ends the rest of the call.
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-p.killed:
			p.stdin.abandon()
		case <-done:
		}
	}()
	code := fn(c)
	close(done)
	<-watched
	p.stdin.abandon()
	exit := &agentwire.Exit{Code: code}
	select {
	case <-p.killed:
		exit.TimedOut = p.timedOut
	default:
	}
	return exit
}

// errCallEnding is what a builtin's output write returns once the call is
// past its cap or being killed.
var errCallEnding = errors.New("the call is ending")

// outWriter sends a builtin's output on fd as out frames.
type outWriter struct {
	p  *proc
	fd int
}

func (w outWriter) Write(b []byte) (int, error) {
	n := 0
	for chunk := range slices.Chunk(b, agentwire.MaxChunk) {
		if !w.p.emit(w.fd, chunk) {
			return n, errCallEnding
		}
		n += len(chunk)
	}
	return n, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// queueReader reads a call's stdin frames as they arrive, acknowledging
// each chunk once it is consumed.
type queueReader struct {
	p    *proc
	rest []byte
	size int
}

func (r *queueReader) Read(b []byte) (int, error) {
	if len(r.rest) == 0 {
		if r.size > 0 {
			r.p.ack(r.size)
			r.size = 0
		}
		data, ok := r.p.stdin.next()
		if !ok {
			return 0, io.EOF
		}
		r.rest, r.size = data, len(data)
	}
	n := copy(b, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// asUser runs fn on an OS thread of its own whose filesystem identity is
// id's: fsuid and fsgid, no supplementary groups and, for a user other
// than root, no effective capabilities (as the call's processes have), so
// every path fn resolves is searched, and every file it makes is owned, as
// by that user's processes. Linux keeps these per thread, and a
// raw syscall changes only the calling one. The thread gets the agent's
// identity back before it returns to the scheduler: it must not end,
// since a thread that ends SIGKILLs every child it started with Pdeathsig
// (the calls' processes, whichever goroutine ran there before). Only a
// thread whose identity cannot be restored is let end with fn. An agent
// not running as root (in tests) already is its only user, and one asked
// to act as itself (root's calls, such as extracting uploads) has nothing
// to change: fn runs as it.
func asUser(id identity, fn func() error) error {
	if os.Geteuid() != 0 || id == (identity{uint32(os.Geteuid()), uint32(os.Getegid())}) {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own := identity{uint32(os.Geteuid()), uint32(os.Getegid())}
		groups, err := unix.Getgroups()
		var caps [2]unix.CapUserData
		if err == nil {
			err = threadCaps(unix.Capget, &caps)
		}
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("getgroups or capget: %w", err)
			return
		}
		// The caps first: setgroups needs CAP_SETGID back.
		restore := func() {
			if threadCaps(unix.Capset, &caps) == nil && setThreadIdentity(own, groups) == nil {
				runtime.UnlockOSThread()
			}
		}
		if err := setThreadIdentity(id, nil); err != nil {
			restore()
			done <- err
			return
		}
		// A fsuid other than 0 clears only the filesystem capabilities;
		// the others reach files too (CAP_SYS_PTRACE opens a root
		// process's /proc/PID/cwd), and the user's processes have none.
		if id.uid != 0 {
			none := caps
			none[0].Effective, none[1].Effective = 0, 0
			if err := threadCaps(unix.Capset, &none); err != nil {
				restore()
				done <- fmt.Errorf("capset: %w", err)
				return
			}
		}
		err = fn()
		restore()
		done <- err
	}()
	return <-done
}

// threadCaps gets or sets the calling thread's capability sets.
func threadCaps(call func(*unix.CapUserHeader, *unix.CapUserData) error, caps *[2]unix.CapUserData) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	return call(&hdr, &caps[0])
}

// setThreadIdentity gives the calling thread id's fsuid and fsgid and the
// supplementary groups given.
func setThreadIdentity(id identity, groups []int) error {
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(id.gid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(id.uid), 0, 0)
	// Each returns the previous value and no error: asking again with an
	// invalid id (-1) changes nothing and reports the current one.
	gid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	uid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	if uint32(uid) != id.uid || uint32(gid) != id.gid {
		return fmt.Errorf("cannot act as uid %d gid %d", id.uid, id.gid)
	}
	return nil
}

// RunBuiltin runs builtin name as this process's own user, in its working
// directory, with the given stdin and output, and returns its exit status.
func RunBuiltin(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return runBuiltin(name, args, stdin, stdout, stderr, nil)
}

// runBuiltin is RunBuiltin ended early, as by a kill frame, when killed
// closes.
func runBuiltin(name string, args []string, stdin io.Reader, stdout, stderr io.Writer, killed <-chan struct{}) (int, error) {
	fn := builtins[name]
	if fn == nil {
		return 0, fmt.Errorf("unknown builtin %q", name)
	}
	dir, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	return fn(&builtinCall{
		Args: args, Stdin: stdin, Stdout: stdout, Stderr: stderr,
		User:    identity{uint32(os.Geteuid()), uint32(os.Getegid())},
		Workdir: dir, Env: os.Environ(), Killed: killed,
	}), nil
}
