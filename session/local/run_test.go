//go:build linux

package local

import (
	"context"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Output the command wrote before it exited is kept when its pipes do not
// end within drainGrace (another process holds them: here one the command
// left behind) while a reader is still behind (here held in its callback
// past the grace): on stdout, and on stderr while the process left behind
// trickles on stdout for longer than the drain (the pipes are drained at
// once).
func TestRunKeepsOutputPastTheDrainGrace(t *testing.T) {
	for _, tt := range []struct {
		name, script string
		stream       int // whose reader is behind: 0 stdout, 1 stderr
	}{
		{"stdout", `printf first; sleep 0.3; printf second; sleep 30 & exit 0`, 0},
		{"stderr, stdout never ending", `printf first >&2; sleep 0.3; printf second >&2; (while :; do echo x; sleep 0.01; done) & exit 0`, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", tt.script)
			var (
				mu     sync.Mutex
				got    []byte
				behind sync.Once
			)
			var cb [2]func([]byte)
			cb[tt.stream] = func(p []byte) {
				behind.Do(func() { time.Sleep(drainGrace + 500*time.Millisecond) })
				mu.Lock()
				defer mu.Unlock()
				got = append(got, p...)
			}
			res, err := run(context.Background(), runSpec{cmd: cmd, maxOutput: 1 << 20, stdout: cb[0], stderr: cb[1]})
			// The process left behind is in the command's group.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			require.NoError(t, err)
			assert.Equal(t, 0, res.ExitCode)
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, "firstsecond", string(got))
		})
	}
}

// A process outside the command that writes without end (here one it left
// behind, holding its stdout) holds the call no longer than the drain
// grace: once the output is capped, nothing more is read.
func TestRunEndsPastTheDrainGraceWhileOutputNeverEnds(t *testing.T) {
	for _, tt := range []struct {
		name, writer string
		overflow     bool
	}{
		{"a flood, past the cap", `yes & exit 0`, true},
		{"a trickle, under the cap", `(while :; do echo x; sleep 0.01; done) & exit 0`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", tt.writer)
			done := make(chan error, 1)
			go func() {
				_, err := run(context.Background(), runSpec{cmd: cmd, maxOutput: 1 << 10})
				done <- err
			}()
			defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()
			select {
			case err := <-done:
				if tt.overflow {
					require.ErrorIs(t, err, session.ErrOutputOverflow)
				} else {
					require.NoError(t, err)
				}
			case <-time.After(2*drainGrace + 10*time.Second):
				t.Fatal("the call still runs while its output never ends")
			}
		})
	}
}
