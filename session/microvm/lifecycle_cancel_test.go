package microvm_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// cutShort plays an msb command whose caller gave up after msb did its
// work but before it answered: the first invocation of command runs to
// its end, then Run waits for its context and fails as the CLI fails a
// cancelled call. Every other invocation runs as it is.
type cutShort struct {
	*msb.CLI
	command string
	armed   atomic.Bool
	acted   chan struct{} // closed once the cut command did its work
}

func (r *cutShort) Run(ctx context.Context, c msb.Call) (*msb.Result, error) {
	if len(c.Args) == 0 || c.Args[0] != r.command || !r.armed.CompareAndSwap(true, false) {
		return r.CLI.Run(ctx, c)
	}
	if _, err := r.CLI.Run(context.WithoutCancel(ctx), c); err != nil {
		return nil, err
	}
	close(r.acted)
	<-ctx.Done()
	return nil, fmt.Errorf("msb %s: %w: %w", r.command, msb.ErrAborted, context.Cause(ctx))
}

// msbRunning lists this Env's msb processes running command.
func msbRunning(env *fakemsbtest.Env, command string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
		args := strings.Split(string(cmdline), "\x00")
		if len(args) < 2 || args[0] != env.Fakemsb || args[1] != command {
			continue
		}
		environ, _ := os.ReadFile("/proc/" + ent.Name() + "/environ")
		if slices.Contains(strings.Split(string(environ), "\x00"), "FAKEMSB_HOME="+env.Home) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestLifecycleCancelled: a Pause or Resume whose context ends while msb
// stop or start runs fails with ErrAborted at once and leaves no msb
// process; whether msb had acted yet or not, the session then tells the
// truth: a call runs over a reopened channel in a running sandbox, and a
// pause leaves the sandbox stopped, in either order.
func TestLifecycleCancelled(t *testing.T) {
	for _, op := range []string{"stop", "start"} {
		for _, acted := range []bool{false, true} {
			for _, callFirst := range []bool{true, false} {
				name := fmt.Sprintf("%s cut before msb acted", op)
				if acted {
					name = fmt.Sprintf("%s cut after msb acted", op)
				}
				if callFirst {
					name += ", then a call"
				} else {
					name += ", then a pause"
				}
				t.Run(name, func(t *testing.T) {
					testLifecycleCancelled(t, op, acted, callFirst)
				})
			}
		}
	}
}

func testLifecycleCancelled(t *testing.T, op string, acted, callFirst bool) {
	env := fakemsbtest.New(t)
	runner := &cutShort{CLI: &msb.CLI{Path: env.Bin}, command: op, acted: make(chan struct{})}
	o := channelOptions(t, env, "")
	o.Client = msb.NewClient(runner)
	s := createSession(t, o)
	bg := context.Background()
	sh(t, s, "true")
	if op == "start" {
		require.NoError(t, s.Pause(bg))
	}

	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	if acted {
		runner.armed.Store(true)
		go func() { <-runner.acted; cancel() }()
	} else {
		env.SetKnob("FAKEMSB_FAULTS", op+"=hang")
		go func() {
			for len(msbRunning(env, op)) == 0 && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
		}()
	}
	var err error
	if op == "stop" {
		err = s.Pause(ctx)
	} else {
		err = s.Resume(ctx)
	}
	require.ErrorIs(t, err, session.ErrAborted)
	assert.Empty(t, msbRunning(env, op), "no msb %s left running", op)
	env.SetKnob("FAKEMSB_FAULTS", "")

	call := func() {
		t.Helper()
		assert.Equal(t, "ok\n", sh(t, s, "echo ok"))
		assert.Equal(t, "Running", sandboxStatus(t, env, s.Name()), "the call's sandbox runs")
		assert.Len(t, env.Channel(s.Name()).Msb, 1, "the call went over a reopened channel")
	}
	pause := func() {
		t.Helper()
		require.NoError(t, s.Pause(bg))
		assert.Equal(t, "Stopped", sandboxStatus(t, env, s.Name()), "the paused sandbox is stopped")
		awaitNoChannel(t, env, s.Name())
	}
	if callFirst {
		call()
		pause()
	} else {
		pause()
		call()
	}
}
