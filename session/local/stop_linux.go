package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// stopTimeout bounds the wait for a session's sandboxes to exit.
const stopTimeout = 5 * time.Second

// stopSessionProcesses SIGKILLs every bubblewrap of the session, run by
// any process (another CLI invocation, an MCP server), before its files
// are removed. A sandbox is recognised by its bind of the session's
// workspace; killing bwrap takes the sandbox's pid namespace with it
// (--die-with-parent). Each process is signalled through a pidfd whose
// command line was checked after it was opened, so a recycled pid is
// never signalled.
//
// The scan is repeated until it finds nothing: a bwrap killed just after
// it cloned its namespace's init, before that child asked for its parent's
// death signal, leaves the child (with the same command line) running and
// unknown to the scan that killed the parent.
//
// It holds the session's resident lock meanwhile: a resident sandbox
// starting in another process is then either started before the scan,
// which ends it, or sees the removal's mark and starts nothing
// (launchResident).
func stopSessionProcesses(d hostDirs) error {
	ctx, cancel := context.WithTimeout(context.Background(), residentHelloTimeout+stopTimeout)
	unlock, err := lockResident(ctx, d.Root)
	cancel()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No directory: nothing can start there.
	case err != nil:
		return fmt.Errorf("waiting for the resident lock (a sandbox starting or being ended): %w", err)
	default:
		defer unlock()
	}
	return stopWorkspaceBinders(d.Workspace)
}

// stopWorkspaceBinders kills the processes binding ws until a scan finds
// none.
func stopWorkspaceBinders(ws string) error {
	deadline := time.Now().Add(stopTimeout)
	for {
		killed, err := killWorkspaceBinders(ws, deadline)
		if err != nil || killed == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox processes still appearing %s after the first SIGKILL", stopTimeout)
		}
	}
}

// killWorkspaceBinders SIGKILLs the processes binding ws and waits, until
// deadline, for them to exit. It returns how many it signalled.
func killWorkspaceBinders(ws string, deadline time.Time) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if !bindsWorkspace(pid, ws) {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		// Checked again through the pidfd's process: the pid may have
		// been recycled between the two looks.
		if !bindsWorkspace(pid, ws) {
			unix.Close(fd)
			continue
		}
		fds = append(fds, fd)
		if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return len(fds), fmt.Errorf("stopping sandbox process %d: %w", pid, err)
		}
	}
	for _, fd := range fds {
		exited, err := waitPidfd(fd, deadline)
		if err != nil {
			return len(fds), err
		}
		if !exited {
			return len(fds), fmt.Errorf("sandbox processes still running %s after SIGKILL", stopTimeout)
		}
	}
	return len(fds), nil
}

// waitPidfd waits, until deadline, for pidfd's process to exit (a pidfd
// turns readable then), and reports whether it did.
func waitPidfd(fd int, deadline time.Time) (bool, error) {
	for {
		left := int(time.Until(deadline).Milliseconds())
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, max(left, 0))
		if err == unix.EINTR {
			continue
		}
		return n > 0, err
	}
}

// bindsWorkspace reports whether pid's command line binds ws at the guest
// workspace path, as every bwrap of the session does.
func bindsWorkspace(pid int, ws string) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	args := bytes.Split(data, []byte{0})
	for i := 0; i+2 < len(args); i++ {
		if (string(args[i]) == "--bind" || string(args[i]) == "--ro-bind") &&
			string(args[i+1]) == ws && string(args[i+2]) == guestWorkspace {
			return true
		}
	}
	return false
}
