//go:build linux

package guestagent

import (
	"errors"
	"fmt"
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
// the child inherits it (a cmd.Dir is then entered by the child, as the
// user, from there); the agent's own directory is restored before another
// start can run. prepare, when set, runs in dir just before the start.
// dir not a directory the agent can enter gives errWorkdir and starts
// nothing. It runs where commands start (spawn).
func startIn(cmd *exec.Cmd, dir string, prepare func()) error {
	return spawn(cmd, func() error { return startHere(cmd, dir, prepare) })
}

func startHere(cmd *exec.Cmd, dir string, prepare func()) error {
	startMu.Lock()
	defer startMu.Unlock()
	home, err := unix.Open(".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the agent's own directory: %w", err)
	}
	defer unix.Close(home)
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("%w: %s: %w", errWorkdir, dir, err)
	}
	if prepare != nil {
		prepare()
	}
	err = cmd.Start()
	// Nothing in the agent uses relative paths: a failed return is harmless.
	_ = unix.Fchdir(home)
	return err
}
