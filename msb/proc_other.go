//go:build !unix

package msb

import (
	"os"
	"os/exec"
)

// setProcessGroup is a no-op where there are no POSIX process groups.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup can only kill msb itself where there are no POSIX
// process groups (nor the flock msb's migration lock is).
func killProcessGroup(p *os.Process, _ []string) error { return p.Kill() }
