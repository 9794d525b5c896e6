package tools_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

func msbSession(t *testing.T) (*fakemsbtest.Env, *session.MsbSession, *tools.Toolbox) {
	env := fakemsbtest.New(t)
	s, err := session.Create(context.Background(), session.Options{
		Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "ws", SessionID: "s", Image: "debian",
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return env, s, tools.New(s, tools.Options{})
}

// A guest that ends before publishing readiness leaves its state unknown:
// the session is poisoned and its sandbox and volume are removed at once.
func TestSearchWithoutReadinessPoisons(t *testing.T) {
	for _, tool := range []string{"glob", "grep"} {
		t.Run(tool, func(t *testing.T) {
			env, s, tb := msbSession(t)
			env.SetKnob("FAKEMSB_FAULTS", "exec#1=exit:1:error: guest agent lost")
			input := `{"pattern": "*"}`
			if tool == "grep" {
				input = `{"pattern": "x", "path": "/workspace"}`
			}
			_, err := tb.Call(context.Background(), tool, []byte(input), nil)
			require.Error(t, err)
			assert.Equal(t, strings.ToUpper(tool[:1])+tool[1:]+" process did not publish readiness", err.Error())
			assert.True(t, s.Poisoned())
			assert.Empty(t, env.Sandboxes(t), "poisoning removes the sandbox")
			assert.Empty(t, env.Volumes(t), "and its volume")

			_, err = tb.Call(context.Background(), "read", []byte(`{"path": "a"}`), nil)
			assert.ErrorIs(t, err, session.ErrPoisoned, "a poisoned session starts nothing")
		})
	}
}

// Ready, capped, and the cleanup fails: the guest may still run tagged work,
// so the session is poisoned and the cleanup error returned.
func TestSearchCleanupFailurePoisons(t *testing.T) {
	env, s, tb := msbSession(t)
	sh(t, s, `mkdir many && cd many && for i in $(seq 1 150); do : > "f$i"; done`)
	env.SetKnob("FAKEMSB_FAULTS", "exec#2=exit:1:error: guest agent lost")
	_, err := tb.Call(context.Background(), "glob", []byte(`{"pattern": "many/*"}`), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "glob cleanup")
	assert.True(t, s.Poisoned())
	assert.Empty(t, env.Sandboxes(t))
	assert.Empty(t, env.Volumes(t))
}

// A caller that gives up before the guest is ready poisons the session too.
func TestSearchAbortBeforeReadinessPoisons(t *testing.T) {
	env, s, tb := msbSession(t)
	env.SetKnob("FAKEMSB_FAULTS", "exec#1=hang")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tb.Call(ctx, "glob", []byte(`{"pattern": "*"}`), nil)
		done <- err
	}()
	cancel()
	err := <-done
	assert.ErrorIs(t, err, session.ErrAborted)
	assert.True(t, s.Poisoned())
	assert.Empty(t, env.Sandboxes(t))
}
