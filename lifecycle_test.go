package omasandbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// pauseScenario: write, pause, a tool call resumes (msb) and reads the file
// back; stats name the state and the disk use; close removes everything.
func pauseScenario(t *testing.T, s *omasandbox.Session, pausedState string) {
	ctx := context.Background()
	require.NoError(t, s.Write(ctx, "note.txt", []byte("kept\n")))
	require.NoError(t, s.Pause(ctx))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, pausedState, st.State)
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
	pauseScenario(t, ms, "paused")
	assert.Empty(t, env.Sandboxes(t), "closing a paused session leaves no sandbox")
	assert.Empty(t, env.Volumes(t), "nor its volume")

	pauseScenario(t, openLocal(t), "idle")
}

// A session attached with NoAutoResume refuses calls while paused.
func TestAttachNoAutoResume(t *testing.T) {
	env := fakemsbtest.New(t)
	ctx := context.Background()
	ms, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "msb", Msb: env.Bin, WorkspaceID: "w1"})
	require.NoError(t, err)
	defer ms.Close(ctx)
	require.NoError(t, ms.Pause(ctx))
	other, err := omasandbox.Attach(ctx, ms.Name(), omasandbox.Options{Msb: env.Bin, NoAutoResume: true})
	require.NoError(t, err)
	_, err = other.Read(ctx, "x", omasandbox.ReadOptions{})
	assert.ErrorIs(t, err, omasandbox.ErrPaused)
}
