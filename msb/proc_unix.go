//go:build unix

package msb

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup puts msb in a new process group so everything it starts
// can be killed with it, and ties msb's life to the host's where the OS can.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
}

// killProcessGroup SIGKILLs msb's whole process group.
func killProcessGroup(p *os.Process) error {
	err := syscall.Kill(-p.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
