//go:build unix

package fakemsbtest

import (
	"os"
	"syscall"
)

func lockShared(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_SH) }

func killPid(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }
