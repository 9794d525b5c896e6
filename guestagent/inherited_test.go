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

// Signals the agent inherited ignored (SIGHUP under nohup; 33, one the C
// library keeps to itself and the Go runtime leaves alone) get their
// default action back; the Go runtime's own handlers stay.
func TestIgnoredSignalsGetTheirDefault(t *testing.T) {
	const sigSetxid = 33
	var goTerm kernelSigaction
	require.Zero(t, rtSigaction(int(unix.SIGTERM), nil, &goTerm))
	require.NotEqual(t, uint64(sigIgn), goTerm.handler)
	for _, sig := range []int{int(unix.SIGHUP), sigSetxid} {
		var old kernelSigaction
		require.Zero(t, rtSigaction(sig, &kernelSigaction{handler: sigIgn}, &old))
		t.Cleanup(func() { rtSigaction(sig, &old, nil) })
	}
	defaultIgnoredSignals()
	for _, sig := range []int{int(unix.SIGHUP), sigSetxid} {
		var now kernelSigaction
		require.Zero(t, rtSigaction(sig, nil, &now))
		require.Zero(t, now.handler, "signal %d still ignored", sig)
	}
	var term kernelSigaction
	require.Zero(t, rtSigaction(int(unix.SIGTERM), nil, &term))
	require.Equal(t, goTerm.handler, term.handler, "the Go runtime's SIGTERM handler was replaced")
}
