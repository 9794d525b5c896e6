package omasandbox_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/session/local"
)

// CPUs and Memory size a local session as they size an msb VM: the
// memory limit binds what runs in it; given with the same limit in
// Limits, or out of range, they are refused and nothing is created.
func TestOpenSizesALocalSession(t *testing.T) {
	if reason := localMissing(); reason != "" {
		t.Skip(reason)
	}
	ctx := context.Background()
	state := t.TempDir()
	for _, o := range []omasandbox.Options{
		{CPUs: 1, Limits: local.Limits{CPUQuota: time.Second / 10, CPUPeriod: time.Second / 10}},
		{Memory: "96M", Limits: local.Limits{MemoryBytes: 64 << 20}},
		{Memory: "lots"},
		{CPUs: 256},
	} {
		o.Backend, o.WorkspaceID, o.StateDir = "local", "w1", state
		_, err := omasandbox.Open(ctx, o)
		assert.ErrorIs(t, err, omasandbox.ErrInvalid, "%+v", o)
	}
	left, err := os.ReadDir(state)
	require.NoError(t, err)
	assert.Empty(t, left, "a refused Open creates nothing")

	if caps := local.Probe(ctx); caps.Limits[local.LimitMemory].Evidence != local.EvidenceFull || caps.Limits[local.LimitCPU].Evidence != local.EvidenceFull {
		t.Skip("this host cannot enforce cgroup memory and CPU limits")
	}
	s, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "local", WorkspaceID: "w1", StateDir: state, CPUs: 1, Memory: "96M"})
	require.NoError(t, err)
	defer s.Close(ctx)
	res, err := s.Bash(ctx, "true", omasandbox.BashOptions{})
	require.NoError(t, err, res.Text)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.NotNil(t, st.MemoryLimitBytes, "the session runs under a memory limit")
	assert.Equal(t, int64(96<<20), *st.MemoryLimitBytes)
}
