package omasandbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// TestLocalAllowlistReachesTheBackend: an allowlist given to Open reaches
// the local backend with its targets, which sets the proxy up.
func TestLocalAllowlistReachesTheBackend(t *testing.T) {
	if reason := localMissing(); reason != "" {
		t.Skip(reason)
	}
	target, err := egress.ParseTarget("127.0.0.1:9")
	require.NoError(t, err)
	ctx := context.Background()
	s, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "local", WorkspaceID: "w1", StateDir: t.TempDir(),
		Network: omasandbox.NetworkPolicy{Allow: []egress.Target{target}}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close(ctx)) })
	res, err := s.Sandbox().Shell(ctx, session.Command{Script: `echo "$HTTP_PROXY"`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:3128\n", string(res.Stdout))
}
