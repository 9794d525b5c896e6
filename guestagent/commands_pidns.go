//go:build linux

package guestagent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// An agent that shares its host uid with the commands it runs (serve
// --commands-pidns: a local session's sandbox on a host where oma-sandbox
// is not root, so bubblewrap maps one uid only) keeps out of their reach
// by their pid namespace instead: every command starts in a pid and mount
// namespace of their own, whose /proc lists only them, so a command can
// name no process of the agent's to signal, trace, read or renice. The
// namespace's init is a helper (commandsInit) that only reaps; the agent,
// in the namespace above, sees, signals and waits for every command as
// before, and is the parent of the commands it starts: it forks them from
// one thread that has entered the namespaces (spawner).

// commandsInitTimeout bounds the wait for the helper to be ready.
const commandsInitTimeout = 5 * time.Second

// commandsNS is the namespaces commands start in; nil when they start in
// the agent's own.
var commandsNS *spawner

// spawner runs functions on an OS thread whose new children are born in
// the commands' pid and mount namespaces; its children's parent death
// signal is tied to that thread, which lives as long as the agent.
type spawner struct {
	init *exec.Cmd // the namespace's pid 1
	run  chan func()
}

// outOfCommandsReach starts the commands' namespaces, their init under
// the seccomp filter (when there is one), then makes the agent undumpable
// (no process of its uid may trace or read it) and drops the capabilities
// that needed, on every thread.
func outOfCommandsReach(filter []byte) error {
	// The read builtin needs openat2 to keep off the agent's own
	// descriptors (openRead).
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return fmt.Errorf("openat2 (Linux 5.6): %w", err)
	}
	unix.Close(fd)
	if err := startCommandsNamespace(filter); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl: %w", err)
	}
	return dropCapabilities()
}

// startCommandsNamespace starts the helper and the spawner.
func startCommandsNamespace(filter []byte) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	sp := &spawner{run: make(chan func())}
	ready := make(chan error, 1)
	go sp.loop(self, filter, ready)
	if err := <-ready; err != nil {
		return fmt.Errorf("commands' namespace: %w", err)
	}
	commandsNS = sp
	return nil
}

// loop is the spawner's thread, which it never leaves.
func (sp *spawner) loop(self string, filter []byte, ready chan<- error) {
	runtime.LockOSThread() // for good: the thread ends with the agent
	fail := func(err error) {
		if sp.init != nil && sp.init.Process != nil {
			_ = sp.init.Process.Kill()
			_ = sp.init.Wait()
		}
		ready <- err
	}
	// The helper reads its filter on one pipe and says on another it is
	// ready to be entered; the end of a third tells it the agent has
	// entered its namespaces, which it then lets no one do (undumpable),
	// and says so on the second before any command can start.
	var pipes [3][2]*os.File // [0] read end, [1] write end
	var err error
	for i := range pipes {
		if pipes[i][0], pipes[i][1], err = os.Pipe(); err != nil {
			fail(err)
			return
		}
		defer pipes[i][0].Close()
		defer pipes[i][1].Close()
	}
	said, entered, filterOut := pipes[0][0], pipes[1][1], pipes[2][1]
	sp.init = &exec.Cmd{
		Path: self, Args: []string{ProgramName, commandsInitArg}, Stderr: os.Stderr,
		ExtraFiles: []*os.File{pipes[0][1], pipes[1][0], pipes[2][0]},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
			Setsid:     true, Pdeathsig: syscall.SIGKILL,
		},
	}
	err = sp.init.Start()
	for _, f := range sp.init.ExtraFiles {
		f.Close() // the helper's ends
	}
	if err != nil {
		sp.init = nil
		fail(fmt.Errorf("starting its init: %w", err))
		return
	}
	_, err = filterOut.Write(filter) // within a pipe's buffer
	filterOut.Close()
	if err != nil {
		fail(fmt.Errorf("giving its init the filter: %w", err))
		return
	}
	_ = said.SetReadDeadline(time.Now().Add(commandsInitTimeout))
	var b [1]byte
	if _, err = io.ReadFull(said, b[:]); err != nil {
		fail(fmt.Errorf("its init did not report ready: %w", err))
		return
	}
	if err := sp.enter(sp.init.Process.Pid); err != nil {
		fail(err)
		return
	}
	entered.Close()
	if _, err = io.ReadFull(said, b[:]); err != nil {
		fail(fmt.Errorf("its init did not report sealed: %w", err))
		return
	}
	said.Close()
	go func() {
		err := sp.init.Wait()
		// Without its init no command can start again, and those running
		// are gone: the sandbox is over.
		fmt.Fprintf(os.Stderr, "oma-guest-agent: the commands' pid namespace ended (%v)\n", err)
		os.Exit(1)
	}()
	ready <- nil
	for fn := range sp.run {
		fn()
	}
}

// enter moves this thread's new children into pid's pid and mount
// namespaces. The thread's file system attributes are made its own first:
// a thread that shares them cannot change its mount namespace, and its
// working directory is then its own too.
func (sp *spawner) enter(pid int) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	// Both opened first: in the new mount namespace /proc is the new pid
	// namespace's, where pid is not the helper's.
	mnt, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(mnt)
	pidns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pidns)
	if err := unix.Setns(mnt, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("setns mnt: %w", err)
	}
	if err := unix.Setns(pidns, unix.CLONE_NEWPID); err != nil {
		return fmt.Errorf("setns pid: %w", err)
	}
	return nil
}

// spawn runs start, which starts cmd, where a command must start: on the
// spawner's thread when commands have namespaces of their own, else here.
// There cmd gets no parent death signal: os/exec's child would take its
// parent, whose pid it cannot see, for dead and kill itself; it dies with
// the agent all the same, with the namespace's init.
func spawn(cmd *exec.Cmd, start func() error) error {
	if commandsNS == nil {
		return start()
	}
	if cmd.SysProcAttr != nil {
		cmd.SysProcAttr.Pdeathsig = 0
	}
	done := make(chan error, 1)
	commandsNS.run <- func() { done <- start() }
	return <-done
}

// commandsInitArg is the helper's command line: `oma-guest-agent
// commands-init`, run by the agent only, as pid 1 of a new namespace.
const commandsInitArg = "commands-init"

// commandsInit is the commands' pid namespace's init: it mounts the
// namespace's own /proc in its mount namespace, as bubblewrap mounted the
// sandbox's (read-only where bubblewrap made it so), drops every
// capability, installs the seccomp filter read from descriptor 5 (none
// when it is empty), reports ready on descriptor 3, waits for the agent
// to have entered its namespaces (descriptor 4 ends), makes itself
// undumpable, says so on descriptor 3, and reaps orphans until the
// agent's death kills it. A command can name it (pid 1) but not stop,
// kill, trace or read it: the kernel spares a namespace's init the
// signals it does not catch, and it catches every other; and it is not
// dumpable from before the first command starts (which keeps the agent,
// too, from opening its namespaces). Were it ever a command's, it would
// still be under the filter and hold nothing a command does not.
func commandsInit(stderr io.Writer) int {
	if os.Getpid() != 1 {
		fmt.Fprintf(stderr, "oma-guest-agent: %s is run by serve --commands-pidns only\n", commandsInitArg)
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "oma-guest-agent: %s: %v\n", commandsInitArg, err)
		return 1
	}
	// Every signal is caught (and dropped), SIGCHLD also to reap.
	all, chld := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(all)
	signal.Notify(chld, syscall.SIGCHLD)
	go func() {
		for range all {
		}
	}()
	if err := mountCommandsProc(); err != nil {
		return fail(err)
	}
	if err := dropCapabilities(); err != nil {
		return fail(err)
	}
	filter, err := readSeccomp(5)
	if err != nil {
		return fail(err)
	}
	if len(filter) > 0 {
		if err := installSeccomp(filter); err != nil {
			return fail(err)
		}
	}
	say, entered := os.NewFile(3, "said"), os.NewFile(4, "entered")
	if _, err := say.Write([]byte{1}); err != nil {
		return fail(err)
	}
	_, _ = io.Copy(io.Discard, entered)
	entered.Close()
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("prctl: %w", err))
	}
	if _, err := say.Write([]byte{2}); err != nil {
		return fail(err)
	}
	say.Close()
	for range chld {
		for {
			var ws unix.WaitStatus
			if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
	return 0
}

// mountCommandsProc mounts the pid namespace's own proc over /proc and
// makes read-only again what bubblewrap's --proc did.
func mountCommandsProc() error {
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("proc", "/proc", "proc", flags, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"} {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", p, err)
		}
	}
	return nil
}

// dropCapabilities empties every capability set of every thread of this
// process (the ambient set goes with the permitted one), so neither this
// process nor a child it starts holds one.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&none[0])), 0)
	switch {
	case errno == syscall.ENOTSUP:
		return errors.New("dropping capabilities: a program built with cgo cannot drop them on every thread; serve with the bundled agent (make agent) or a CGO_ENABLED=0 build")
	case errno != 0:
		return fmt.Errorf("dropping capabilities: %w", errno)
	}
	return nil
}
