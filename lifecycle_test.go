package omasandbox_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// pauseScenario: write, pause, a tool call resumes and reads the file back;
// stats name the state and the disk use; close removes everything.
func pauseScenario(t *testing.T, s *omasandbox.Session) {
	ctx := context.Background()
	require.NoError(t, s.Write(ctx, "note.txt", []byte("kept\n")))
	require.NoError(t, s.Pause(ctx))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, "paused", st.State)
	require.NotNil(t, st.DiskUsedBytes)
	assert.Positive(t, *st.DiskUsedBytes)
	text, err := s.Read(ctx, "note.txt", omasandbox.ReadOptions{})
	require.NoError(t, err)
	assert.Contains(t, text, "kept")
	require.NoError(t, s.Resume(ctx))
	require.NoError(t, s.Pause(ctx))
	require.NoError(t, s.Close(ctx))
}

func TestPauseOnFakemsbAndLocal(t *testing.T) {
	env := fakemsbtest.New(t)
	ctx := context.Background()
	ms, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "msb", Msb: env.Bin, WorkspaceID: "w1", IdleTimeout: "30m"})
	require.NoError(t, err)
	pauseScenario(t, ms)
	assert.Empty(t, env.Sandboxes(t), "closing a paused session leaves no sandbox")
	assert.Empty(t, env.Volumes(t), "nor its volume")

	pauseScenario(t, openLocal(t))
}

// A session attached with NoAutoResume refuses every tool's call while
// paused, on either backend, and the refusal changes nothing: the session
// is not poisoned, and on the local backend a background process started
// before the pause still runs once resumed. The one that paused it
// resumes it on use.
func TestAttachNoAutoResume(t *testing.T) {
	env := fakemsbtest.New(t)
	ctx := context.Background()
	ms, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "msb", Msb: env.Bin, WorkspaceID: "w1"})
	require.NoError(t, err)
	defer ms.Close(ctx)
	check := func(s *omasandbox.Session, o omasandbox.Options) {
		require.NoError(t, s.Write(ctx, "x", []byte("x")))
		background := s.Backend() == "local"
		if background {
			_, err := s.Bash(ctx, "sleep 600 & echo $! > bg.pid", omasandbox.BashOptions{})
			require.NoError(t, err)
		}
		require.NoError(t, s.Pause(ctx))
		o.NoAutoResume = true
		other, err := omasandbox.Attach(ctx, s.Name(), o)
		require.NoError(t, err)
		for tool, input := range map[string]string{
			"read":  `{"path":"x"}`,
			"write": `{"path":"y","content":"y"}`,
			"edit":  `{"path":"x","oldText":"x","newText":"z"}`,
			"ls":    `{"path":"."}`,
			"glob":  `{"pattern":"*"}`,
			"grep":  `{"pattern":"x","path":"` + s.Paths().Workspace + `"}`,
			"bash":  `{"command":"touch ran"}`,
		} {
			_, err = other.Call(ctx, tool, json.RawMessage(input))
			assert.ErrorIs(t, err, omasandbox.ErrPaused, "%s: %s", s.Name(), tool)
		}
		assert.False(t, other.Sandbox().Poisoned(), "%s: a refused call poisons nothing", s.Name())
		text, err := s.Read(ctx, "x", omasandbox.ReadOptions{})
		require.NoError(t, err, s.Name())
		assert.Contains(t, text, "x", "%s: no edit ran", s.Name())
		_, err = other.Read(ctx, "x", omasandbox.ReadOptions{})
		assert.NoError(t, err, "%s: resumed, the other process's session still serves", s.Name())
		res, err := s.Bash(ctx, "test ! -e y && test ! -e ran && echo nothing-ran", omasandbox.BashOptions{})
		require.NoError(t, err, s.Name())
		assert.Contains(t, res.Text, "nothing-ran", s.Name())
		if background {
			res, err := s.Bash(ctx, `tr '\0' ' ' < "/proc/$(cat bg.pid)/cmdline" | grep -q "^sleep 600" && echo still-running`, omasandbox.BashOptions{})
			require.NoError(t, err, s.Name())
			assert.Contains(t, res.Text, "still-running", "%s: the background process outlives a refused call", s.Name())
		}
	}
	check(ms, omasandbox.Options{Msb: env.Bin})
	if reason := localMissing(); reason != "" {
		t.Skip(reason)
	}
	state := t.TempDir()
	ls, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "local", WorkspaceID: "w1", StateDir: state})
	require.NoError(t, err)
	defer ls.Close(ctx)
	check(ls, omasandbox.Options{StateDir: state})
}
