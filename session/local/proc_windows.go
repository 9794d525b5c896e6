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

// killGroup kills the process. No session runs on Windows (see
// platform_other.go); the package builds there for the CLI's sake.
func killGroup(p *os.Process) { _ = p.Kill() }

func exitCode(ps *os.ProcessState) int { return ps.ExitCode() }
