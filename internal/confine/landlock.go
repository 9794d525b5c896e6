//go:build linux

package confine

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Abstract unix sockets live in the network namespace, so a sandbox that
// shares the host's network (--network unrestricted) could connect to the
// host's (a desktop session bus, a container runtime's control socket).
// Landlock's ABI 6 scopes them: a process in a Landlock domain cannot
// connect to an abstract socket bound outside that domain, while
// path-based unix sockets, and abstract sockets bound inside the sandbox,
// keep working. sandbox-runtime instead refuses socket(AF_UNIX) outright,
// which breaks every local tool that talks over a unix socket; the seccomp
// filter does that only on kernels without the scope (see Filter).

// ScopeABI is the first Landlock ABI with LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET.
const ScopeABI = 6

// LandlockABI is the kernel's Landlock ABI version, 0 without Landlock.
func LandlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// rulesetAttr is struct landlock_ruleset_attr up to its scoped field.
type rulesetAttr struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}

// EnterScope puts the calling OS thread, and so every process it starts
// or execs, into a Landlock domain that restricts nothing but connections
// to abstract unix sockets bound outside it. The caller must have locked
// the thread (runtime.LockOSThread) and keep it out of the scheduler:
// StartScoped does that; a launcher about to exec can call it directly.
func EnterScope() error {
	attr := rulesetAttr{scoped: unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	if os.Geteuid() != 0 {
		// Without CAP_SYS_ADMIN, Landlock needs no_new_privs; it only
		// affects this thread and what it starts.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// StartScoped starts cmd from an OS thread of its own that first enters
// the abstract-socket scope (StartHeld with scoped).
func StartScoped(cmd *exec.Cmd) (release func(), err error) { return StartHeld(cmd, true) }

// StartHeld starts cmd from an OS thread of its own that stays, parked,
// until release, because bwrap's --die-with-parent fires when the thread
// that started it ends. With scoped, the thread first enters the
// abstract-socket scope and is never returned to the Go scheduler: it ends
// with its goroutine at release, so no other goroutine ever runs
// restricted.
func StartHeld(cmd *exec.Cmd, scoped bool) (release func(), err error) {
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if scoped {
			if err := EnterScope(); err != nil {
				started <- err
				return
			}
		}
		err := cmd.Start()
		started <- err
		if err == nil {
			<-done
		}
		if !scoped {
			runtime.UnlockOSThread()
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return func() { close(done) }, nil
}
