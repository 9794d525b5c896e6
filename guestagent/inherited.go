//go:build linux

package guestagent

import (
	"math"
	"os"
	"strconv"

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
