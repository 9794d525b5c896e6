//go:build linux

package guestagent

import (
	"math"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// keepInheritedFromCommands marks every descriptor above stderr that the
// agent inherited close-on-exec, so none reaches a command it runs: its
// starter may leak any (a shell's, a test harness's, msb's), and a
// command may only hold what the agent gives it. The descriptors named on
// its command line (--ready-fd, --listen-fd, --seccomp-fd) are the agent's
// own to use, and it passes them on only explicitly.
func keepInheritedFromCommands() {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	markEachCloseOnExec() // kernels before 5.11
}

// markEachCloseOnExec is keepInheritedFromCommands one descriptor at a
// time.
func markEachCloseOnExec() {
	dir, err := os.Open("/proc/self/fd")
	if err != nil {
		return
	}
	names, _ := dir.Readdirnames(-1)
	dir.Close()
	for _, name := range names {
		if fd, err := strconv.Atoi(name); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// kernelSigaction is the kernel's struct sigaction on amd64 and arm64.
type kernelSigaction struct {
	handler, flags, restorer, mask uint64
}

const sigIgn = 1 // SIG_IGN; SIG_DFL is 0

func rtSigaction(sig int, act, old *kernelSigaction) syscall.Errno {
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	return errno
}

// defaultIgnoredSignals gives every signal the agent inherited ignored
// its default action again. An ignored signal stays ignored across exec,
// and a command cannot undo that (a shell may not trap a signal ignored
// on entry): under a starter that ignored SIGHUP (nohup) or the C
// library's own signals, every command would run unlike any other. The
// Go runtime's handlers, which are not "ignore", are left as they are.
func defaultIgnoredSignals() {
	for sig := 1; sig <= 64; sig++ {
		var old kernelSigaction
		if rtSigaction(sig, nil, &old) == 0 && old.handler == sigIgn {
			rtSigaction(sig, &kernelSigaction{}, nil)
		}
	}
}
