//go:build linux

package guestagent

import (
	"errors"
	"os/exec"
	"sync"

	"golang.org/x/sys/unix"
)

// errWorkdir says a call's workdir could not be entered, even as root.
var errWorkdir = errors.New("workdir cannot be entered")

// startMu serialises the changes of this process's working directory,
// which all its threads share, around each command's start.
var startMu sync.Mutex

// startIn starts cmd in dir in msb's order: msb's agent changes directory
// as root before it switches to the call's user, so a workdir the guest
// made unsearchable for that user (mode 000, root's 0700) still starts
// the call, in a directory it cannot read. Go's SysProcAttr switches
// users before it changes directory, so the agent enters dir itself and
// the child inherits it; the agent's own directory (home, an O_PATH
// descriptor) is restored before another start can run. dir not a
// directory the agent can enter gives errWorkdir and starts nothing.
func startIn(cmd *exec.Cmd, dir string, home int) error {
	startMu.Lock()
	defer startMu.Unlock()
	if err := unix.Chdir(dir); err != nil {
		return errWorkdir
	}
	err := cmd.Start()
	// Nothing in the agent uses relative paths: a failed return is harmless.
	_ = unix.Fchdir(home)
	return err
}
