package local

import (
	"os"
	"os/exec"
	"syscall"
)

func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= syscall.CREATE_NEW_PROCESS_GROUP
}

// killGroup kills the broker, whose own cleanup takes its sandbox down.
func killGroup(p *os.Process) { _ = p.Kill() }

func exitCode(ps *os.ProcessState) int { return ps.ExitCode() }
