//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// TestEveryCallHasADeadline: a guest leaves a FIFO in the workspace; a
// call that names no timeout of its own (as grep, glob and outputs do)
// and a grep of the FIFO through the agent tools both end at the
// session's operation timeout instead of hanging. The test itself gives
// up (and fails) 10 s after that timeout.
func TestEveryCallHasADeadline(t *testing.T) {
	const op = 1500 * time.Millisecond
	s := newTestSession(t, Options{OperationTimeout: op})
	sh(t, s, `mkfifo /workspace/pipe`)
	tb := tools.New(s, tools.Options{OperationTimeout: op})
	for name, call := range map[string]func(context.Context) error{
		"shell": func(ctx context.Context) error {
			_, err := s.Shell(ctx, session.Command{Script: `cat /workspace/pipe`}, session.ShellOptions{})
			if !errors.Is(err, session.ErrHostTimeout) {
				return errors.Join(errors.New("want a host timeout"), err)
			}
			return nil
		},
		"grep": func(ctx context.Context) error {
			_, err := tb.Call(ctx, "grep", json.RawMessage(`{"pattern":"x","path":"/workspace/pipe"}`), nil)
			t.Logf("grep of a FIFO: %v", err)
			return nil
		},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		giveUp := time.AfterFunc(op+10*time.Second, cancel)
		start := time.Now()
		err := call(ctx)
		stopped := giveUp.Stop()
		cancel()
		if !stopped {
			t.Fatalf("%s: still running %s after the operation timeout", name, 10*time.Second)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s ended after %s", name, time.Since(start))
	}
	if _, err := Create(context.Background(), Options{StateDir: t.TempDir(), OperationTimeout: -time.Second}); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("negative operation timeout: %v", err)
	}
}
