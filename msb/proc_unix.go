//go:build unix

package msb

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// setProcessGroup puts msb in a new process group so everything it starts
// can be killed with it, and ties msb's life to the host's where the OS can.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
}

// killProcessGroup SIGKILLs msb's whole process group, holding the
// migration lock of the msb home env names (see migrationLock) while it
// does, so that no msb of the group is killed while it may hold the
// install lease.
func killProcessGroup(p *os.Process, env []string) error {
	defer holdMigrationLock(migrationLockPath(env), migrationLockWait)()
	err := syscall.Kill(-p.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// holdMigrationLock takes an exclusive flock of path, waiting at most wait,
// and returns its release. Without the file (no msb has used that home, or
// it is a remote backend's) or past wait, it holds nothing.
func holdMigrationLock(path string, wait time.Duration) (release func()) {
	f, err := os.Open(path)
	if err != nil {
		return func() {}
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			// Closing the file releases the lock.
			return func() { f.Close() }
		case errors.Is(err, syscall.EINTR):
		case !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline):
			f.Close()
			return func() {}
		default:
			time.Sleep(2 * time.Millisecond)
		}
	}
}
