//go:build linux

package guestagent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// asUser leaves the thread none of root's privileges over files: not the
// filesystem capabilities (chown, chmod or utimes of another's file,
// O_NOATIME, mknod) and not the others that reach files, such as
// CAP_SYS_PTRACE, which would let it through /proc/PID/cwd of a root
// process into a directory only root may search.
func TestAsUserHasNoPrivilege(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch identities")
	}
	dir, err := os.MkdirTemp("", "asuserpriv")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o777))
	rootFile := dir + "/root-file"
	must(t, os.WriteFile(rootFile, []byte("root's\n"), 0o666))
	mine := dir + "/mine"
	must(t, os.WriteFile(mine, nil, 0o644))
	must(t, os.Chown(mine, 65534, 65534))
	hidden := dir + "/private/sub"
	must(t, os.MkdirAll(hidden, 0o755))
	must(t, os.Chmod(dir+"/private", 0o700))
	must(t, os.WriteFile(hidden+"/secret", []byte("secret\n"), 0o644))
	// A root process whose working directory nobody cannot reach.
	sleeper := exec.Command("sleep", "60")
	sleeper.Dir = hidden
	must(t, sleeper.Start())
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	viaProc := "/proc/" + strconv.Itoa(sleeper.Process.Pid) + "/cwd/secret"
	if _, err := os.ReadFile(viaProc); err != nil {
		t.Fatalf("root cannot read %s: %v", viaProc, err)
	}

	refused := func(what string, err error) error {
		if err == nil {
			return fmt.Errorf("%s: allowed", what)
		}
		if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) {
			return fmt.Errorf("%s: %v, want EPERM or EACCES", what, err)
		}
		return nil
	}
	err = asUser(identity{65534, 65534}, func() error {
		// Threads the runtime starts meanwhile (for these goroutines'
		// blocking calls) must not be cloned from this one: checked below.
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { _ = unix.Nanosleep(&unix.Timespec{Nsec: 20e6}, nil) })
		}
		wg.Wait()
		_, err := os.ReadFile(viaProc)
		return errors.Join(
			refused("read through a root process's /proc/PID/cwd", err),
			refused("chown of its own file to root", unix.Chown(mine, 0, 0)),
			refused("chmod of root's file", unix.Chmod(rootFile, 0o777)),
			refused("utimes of root's file", unix.UtimesNano(rootFile, []unix.Timespec{{Sec: 1}, {Sec: 1}})),
			refused("O_NOATIME open of root's file", openNoatime(rootFile)),
			refused("mknod of a device", unix.Mknod(dir+"/dev", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))),
		)
	})
	if err != nil {
		t.Error(err)
	}
	// Nor does a builtin call as nobody.
	h := startAgentHost(t, "/")
	if code, out := h.call(1, agentwire.BuiltinRead, "", viaProc, "1", "10", "100", "shown", "END"); code != 3 || out != "2:File not found: shown\n" {
		t.Errorf("read through /proc/PID/cwd as nobody: exit %d %q", code, out)
	}
	// The agent's own thread is root again, and so is every thread
	// asUser gave back to the scheduler.
	if _, err := os.ReadFile(viaProc); err != nil {
		t.Errorf("the agent lost root: %v", err)
	}
	want := threadPrivilege(t, "self")
	tasks, err := os.ReadDir("/proc/self/task")
	must(t, err)
	for _, task := range tasks {
		if got := threadPrivilege(t, "self/task/"+task.Name()); got != want && got != "" {
			t.Errorf("thread %s: %q, want the agent's %q", task.Name(), got, want)
		}
	}
}

// threadPrivilege is a thread's ids, groups and effective capabilities
// from /proc/PATH/status; "" for a thread that ended.
func threadPrivilege(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + path + "/status")
	if err != nil {
		return ""
	}
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, key := range []string{"Uid:", "Gid:", "Groups:", "CapEff:"} {
			if strings.HasPrefix(line, key) {
				keep = append(keep, line)
			}
		}
	}
	return strings.Join(keep, "; ")
}

func openNoatime(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}
