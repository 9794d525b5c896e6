package local

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// probeArg makes the test binary run sandboxProbe instead of the tests.
const probeArg = "oma-sandbox-probe"

// sandboxProbe runs inside a sandbox: each argument names one attempt,
// and one line "NAME=ok" or "NAME=ERRNO" is printed for each.
func sandboxProbe(args []string) int {
	for _, a := range args {
		name, param, _ := strings.Cut(a, ":")
		fmt.Printf("%s=%s\n", name, outcome(attempt(name, param)))
	}
	return 0
}

func outcome(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

func attempt(name, param string) error {
	switch name {
	case "vsock":
		return socketOf(unix.AF_VSOCK)
	case "vsock-high-bits":
		// The kernel reads the domain as an int: the upper bits drop.
		fd, _, errno := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_VSOCK|1<<32, unix.SOCK_STREAM, 0)
		if errno != 0 {
			return errno
		}
		return unix.Close(int(fd))
	case "abstract":
		return connectUnix("@" + param)
	case "path-socket":
		return listenAndConnect(filepath.Join(param, "probe.sock"))
	case "inner-abstract":
		return listenAndConnect("@" + param)
	case "clone-userns":
		c := exec.Command("/bin/true")
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
		err := c.Run()
		var pe *os.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		return err
	case "personality":
		// READ_IMPLIES_EXEC, as an exploit would set it.
		_, _, errno := unix.RawSyscall(unix.SYS_PERSONALITY, 0x0400000, 0, 0)
		if errno != 0 {
			return errno
		}
		return nil
	case "keyctl":
		_, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
		return err
	case "io_uring":
		var params [120]byte
		fd, _, errno := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
		if errno != 0 {
			return errno
		}
		return unix.Close(int(fd))
	}
	return fmt.Errorf("unknown attempt %q", name)
}

func socketOf(domain int) error {
	fd, err := unix.Socket(domain, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func unixAddr(name string) *unix.SockaddrUnix {
	if strings.HasPrefix(name, "@") {
		return &unix.SockaddrUnix{Name: "\x00" + name[1:]}
	}
	return &unix.SockaddrUnix{Name: name}
}

func connectUnix(name string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, unixAddr(name))
}

func listenAndConnect(name string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, unixAddr(name)); err != nil {
		return err
	}
	if err := unix.Listen(fd, 1); err != nil {
		return err
	}
	return connectUnix(name)
}

// probeBinary copies the test binary into the session's workspace, so a
// command can run it as ./probe.
func probeBinary(t *testing.T, s *Session) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(s.dirs.Workspace, "probe")
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
