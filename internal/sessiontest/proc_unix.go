//go:build unix

package sessiontest

import (
	"os/exec"
	"syscall"
)

// The command gets its own process group, so that killing the group takes
// its background children with it, as a guest's would go.
func setProcessGroup(c *exec.Cmd) { c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

func killProcessGroup(c *exec.Cmd) { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }

func terminate(c *exec.Cmd) { _ = c.Process.Signal(syscall.SIGTERM) }
