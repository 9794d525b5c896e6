package omasandbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// forkScenario: write, fork, change the file differently in both: each
// reads only its own change; closing the source leaves the fork working.
func forkScenario(t *testing.T, src *omasandbox.Session) {
	ctx := context.Background()
	require.NoError(t, src.Write(ctx, "note.txt", []byte("base\n")))
	fork, err := src.Fork(ctx, "branch")
	require.NoError(t, err)
	assert.NotEqual(t, src.Name(), fork.Name())
	assert.Equal(t, src.Backend(), fork.Backend())
	require.NoError(t, src.Write(ctx, "note.txt", []byte("source\n")))
	require.NoError(t, fork.Write(ctx, "note.txt", []byte("fork\n")))
	read := func(s *omasandbox.Session) string {
		text, err := s.Read(ctx, "note.txt", omasandbox.ReadOptions{})
		require.NoError(t, err)
		return text
	}
	assert.Contains(t, read(src), "source")
	assert.NotContains(t, read(src), "fork")
	assert.Contains(t, read(fork), "fork")
	assert.NotContains(t, read(fork), "source")
	require.NoError(t, src.Close(ctx))
	assert.Contains(t, read(fork), "fork")
	require.NoError(t, fork.Close(ctx))
}

func TestForkOnFakemsbAndLocal(t *testing.T) {
	env := fakemsbtest.New(t)
	ms, err := omasandbox.Open(context.Background(), omasandbox.Options{Backend: "msb", Msb: env.Bin, WorkspaceID: "w1"})
	require.NoError(t, err)
	forkScenario(t, ms)
	assert.Empty(t, env.Sandboxes(t), "nothing left after both close")
	assert.Empty(t, env.Volumes(t))

	forkScenario(t, openLocal(t))
}
