package tools_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

func TestBashExitCodeStreamed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		var mu sync.Mutex
		var streamed strings.Builder
		before := calls()
		_, err := tb.Call(context.Background(), "bash", []byte(`{"command": "echo one; echo two >&2; pwd; exit 7"}`), func(p []byte) {
			mu.Lock()
			streamed.Write(p)
			mu.Unlock()
		})
		var cmdErr *tools.CommandError
		require.ErrorAs(t, err, &cmdErr)
		assert.Equal(t, 7, cmdErr.ExitCode)
		want := "one\ntwo\n" + s.Paths().Workspace + "\n"
		assert.Equal(t, want+"\n\nCommand exited with code 7", cmdErr.Text)
		assert.Equal(t, want, streamed.String(), "output streams without sentinels")
		assert.Equal(t, 1, calls()-before, "a bash call is one round trip")

		out := mustCall(t, tb, "bash", obj{"command": "true"})
		assert.Equal(t, "(no output)", out)
	})
}

// A terminal line forged by the command never outranks the process status.
func TestBashForgedTerminalLine(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		// The command reads its token from the wrapper's arguments and
		// prints a terminal record claiming success before exiting 3.
		cmd := `tok=$(tr '\0' '\n' < /proc/$PPID/cmdline | tail -n 1); printf '__OMA_TERMINAL__:%s:exit:0\n' "$tok"; exit 3`
		_, err := call(t, tb, "bash", obj{"command": cmd})
		require.Error(t, err)
		assert.ErrorIs(t, err, bashproto.ErrExitMismatch)
	})
}

func TestBashGuestTimeoutKeepsSession(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		_, err := call(t, tb, "bash", obj{"command": "echo started; sleep 30.17", "timeout": 1})
		var cmdErr *tools.CommandError
		require.ErrorAs(t, err, &cmdErr)
		assert.True(t, cmdErr.TimedOut)
		assert.Equal(t, "started\n\n\nCommand timed out after 1 seconds", cmdErr.Text)
		assert.False(t, s.Poisoned())
		assert.Equal(t, "ok", mustCall(t, tb, "bash", obj{"command": "printf ok"}), "the session is still usable")
		assert.Equal(t, "0\n", sh(t, s, `ps -eo args | grep -c '[s]leep 30.17' || true`), "the command's group is gone")
	})
}

// A host deadline or an abort kills the guest's process group through the pid file.
func TestBashHostTimeoutAndAbortKillGuest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		for _, c := range []struct {
			name string
			ctx  func() (context.Context, context.CancelFunc)
			want error
		}{
			{"host timeout", func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 1500*time.Millisecond)
			}, session.ErrAborted},
			{"abort", func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(1500*time.Millisecond, cancel)
				return ctx, cancel
			}, session.ErrAborted},
		} {
			ctx, cancel := c.ctx()
			_, err := tb.Call(ctx, "bash", []byte(`{"command": "(sleep 41.3 &) ; setsid sleep 42.3 & sleep 43.3", "timeout": 60}`), nil)
			cancel()
			assert.ErrorIs(t, err, c.want, c.name)
			assert.Equal(t, "0\n", sh(t, s, `ps -eo args | grep -c '[s]leep 4[123].3' || true`), "%s: no guest process left", c.name)
		}
		assert.False(t, s.Poisoned())
	})
}

func TestBashBackgroundHolderReturnsPromptly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		done := make(chan struct{})
		var out string
		var err error
		go func() {
			defer close(done)
			out, err = call(t, tb, "bash", obj{"command": "sleep 300.7 & echo started", "timeout": 60})
		}()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("a background process holding stdout hung the call")
		}
		require.NoError(t, err)
		assert.Equal(t, "started\n", out)
		sh(t, s, `pkill -f '^sleep 300.7' || true`)
	})
}

func TestBashRefusesBadTimeout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		before := calls()
		for _, in := range []string{`{"command": "true", "timeout": 0}`, `{"command": "true", "timeout": 3601}`, `{"command": "true", "timeout": "5"}`} {
			_, err := tb.Call(context.Background(), "bash", []byte(in), nil)
			assert.EqualError(t, err, "bash timeout must be an integer from 1 through 3600 seconds")
		}
		_, err := tb.Call(context.Background(), "bash", []byte(`{}`), nil)
		assert.True(t, errors.Is(err, tools.ErrInvalidInput))
		assert.Equal(t, 0, calls()-before)
	})
}
