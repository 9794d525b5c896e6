//go:build linux

package guestagent

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Both ways of keeping inherited descriptors from commands (close_range,
// and one at a time on older kernels) leave none open across exec.
func TestInheritedDescriptorsCloseOnExec(t *testing.T) {
	for name, mark := range map[string]func(){"close_range": keepInheritedFromCommands, "one at a time": markEachCloseOnExec} {
		t.Run(name, func(t *testing.T) {
			fd, err := unix.Dup(2) // dup leaves close-on-exec off, as a leaked descriptor has it
			require.NoError(t, err)
			defer unix.Close(fd)
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			require.NoError(t, err)
			require.Zero(t, flags&unix.FD_CLOEXEC)
			mark()
			flags, err = unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			require.NoError(t, err)
			require.NotZero(t, flags&unix.FD_CLOEXEC, "descriptor %d would reach a command", fd)
		})
	}
}
