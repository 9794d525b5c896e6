//go:build linux

package guestagent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ServeInUserNS runs argv (this agent, serving) as root of a new user
// namespace in which uid and gid 0 are the host's rootID and user maps to
// itself, with stdin, stdout and stderr passed through, and returns its
// exit status. It is how a local session's resident sandbox keeps its
// agent out of its commands' reach while owning nothing of the host's:
// the caller is the sandbox's root, holding only CAP_SETUID and
// CAP_SETGID to write the maps; the agent it starts holds capabilities
// only over its own namespace, where its calls run as user.
// files become the agent's descriptors 3, 4 and so on, and are closed
// here once it started.
func ServeInUserNS(rootID, user int, argv []string, files []*os.File) (int, error) {
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: rootID, Size: 1}, {ContainerID: user, HostID: user, Size: 1}}
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := &exec.Cmd{
		Path: self, Args: argv, Env: os.Environ(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: files,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: ids, GidMappings: ids, GidMappingsEnableSetgroups: true,
			Credential: &syscall.Credential{Uid: 0, Gid: 0},
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	err = cmd.Start()
	// The agent holds its descriptors now; a listener left open here too
	// would take connections after the agent died.
	for _, f := range files {
		f.Close()
	}
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return waitStatus(exit.ProcessState), nil
		}
		return 0, err
	}
	return 0, nil
}

// readSeccomp reads a seccomp filter (an array of struct sock_filter, as
// bwrap's --seccomp takes) from fd and closes fd.
func readSeccomp(fd int) ([]byte, error) {
	f := os.NewFile(uintptr(fd), "seccomp")
	if f == nil {
		return nil, fmt.Errorf("seccomp fd %d: not open", fd)
	}
	prog, err := io.ReadAll(io.LimitReader(f, int64(maxSeccompBytes)+1))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("seccomp fd %d: %w", fd, err)
	}
	return prog, nil
}

// maxSeccompBytes is the largest filter the kernel takes: 4096
// instructions.
const maxSeccompBytes = 4096 * int(unsafe.Sizeof(unix.SockFilter{}))

// installSeccomp installs filter prog on every thread of this process, so
// it and everything it starts run under it. no_new_privs must already be
// set (bwrap sets it).
func installSeccomp(prog []byte) error {
	const insnSize = int(unsafe.Sizeof(unix.SockFilter{}))
	if len(prog) == 0 || len(prog)%insnSize != 0 || len(prog) > maxSeccompBytes {
		return fmt.Errorf("seccomp: %d bytes are not a filter", len(prog))
	}
	insns := make([]unix.SockFilter, len(prog)/insnSize)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&insns[0])), len(prog)), prog)
	fprog := unix.SockFprog{Len: uint16(len(insns)), Filter: &insns[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}
