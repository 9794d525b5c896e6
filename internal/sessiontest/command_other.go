//go:build !linux

package sessiontest

import (
	"fmt"
	"os/exec"
	"runtime"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// command is the process that runs cmd: bash. The guest agent, which runs
// the builtins, is a Linux program.
func command(cmd session.Command) (*exec.Cmd, error) {
	if cmd.Builtin != "" {
		return nil, fmt.Errorf("sessiontest: builtin %s needs the guest agent, which does not run on %s", cmd.Builtin, runtime.GOOS)
	}
	return exec.Command("/bin/bash", append([]string{"-c", cmd.Script, "bash"}, cmd.Args...)...), nil
}
