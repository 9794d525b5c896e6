//go:build linux

package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/internal/confine"
)

// Every guest command runs under internal/confine's seccomp filter (no
// new user namespace, no AF_VSOCK, no mount or setns, ...), as on the
// local backend. bwrap's --seccomp would confine only the holder's idle
// process, and nsenter must call setns before any filter can refuse it,
// so the filter is loaded between the two: nsenter execs this binary,
// handed over as descriptor guestLauncherFD and run as
// /proc/self/fd/guestLauncherFD inside the guest's namespaces, which
// loads the filter (and, for a sandbox on the host's network, the
// Landlock scope that keeps the host's abstract unix sockets out of
// reach) on its own OS thread and execs the rest of the command line
// from that thread. It never returns to fakemsb's main.
const (
	guestLauncherArg = "__fakemsb-confine"
	guestLauncherFD  = 3
)

// launcherMode says what, beyond the seccomp filter, a guest command needs.
type launcherMode string

const (
	launchPlain  launcherMode = "plain"  // own network namespace: its abstract sockets are its own
	launchScoped launcherMode = "scoped" // host network, with Landlock's abstract-socket scope
	launchNoUnix launcherMode = "nounix" // host network, no Landlock scope: no AF_UNIX sockets
)

// guestLauncher returns the argv prefix that runs a command in sb under
// the launcher, and the file to pass as guestLauncherFD.
func guestLauncher(sb *sandbox) ([]string, *os.File, error) {
	// The running binary itself, even if its file was replaced since.
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, nil, err
	}
	mode := launchPlain
	switch {
	case !sb.Network:
	case confine.LandlockABI() >= confine.ScopeABI:
		mode = launchScoped
	default:
		mode = launchNoUnix
	}
	return []string{fmt.Sprintf("/proc/self/fd/%d", guestLauncherFD), guestLauncherArg, string(mode), "--"}, f, nil
}

// runGuestLauncher is the launcher's whole life: args are the mode, "--"
// and the command line to exec.
func runGuestLauncher(args []string) {
	runtime.LockOSThread()
	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "error: exec failed: confining the guest command: "+format+"\n", a...)
		os.Exit(255)
	}
	if len(args) < 3 || args[1] != "--" {
		fail("bad launcher arguments %q", args)
	}
	mode, argv := launcherMode(args[0]), args[2:]
	if mode != launchPlain && mode != launchScoped && mode != launchNoUnix {
		fail("unknown mode %q", mode)
	}
	// The guest must never hold a descriptor of a host file.
	unix.CloseOnExec(guestLauncherFD)
	if os.Geteuid() != 0 {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			fail("no_new_privs: %v", err)
		}
	}
	if mode == launchScoped {
		if err := confine.EnterScope(); err != nil {
			fail("%v", err)
		}
	}
	prog, err := confine.Filter(confine.FilterOptions{DenyUnixSockets: mode == launchNoUnix})
	if err != nil {
		fail("%v", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// Without SECCOMP_FILTER_FLAG_TSYNC: only this locked thread, which
	// execs next, needs it.
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		fail("seccomp: %v", errno)
	}
	err = syscall.Exec(argv[0], argv, os.Environ())
	fail("%s: %v", argv[0], err)
}
