package tools_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// backends is every Session implementation the tool suite runs against.
var backends = []backend{
	{name: "host", open: openHost},
	{name: "msb", open: openMsb},
	{name: "local", open: openLocal},
}

// countingSession counts the round trips a backend without an invocation
// log makes.
type countingSession struct {
	session.Session
	n atomic.Int64
}

func (c *countingSession) ProcessesEndWithCall() bool {
	scoped, ok := c.Session.(interface{ ProcessesEndWithCall() bool })
	return ok && scoped.ProcessesEndWithCall()
}

func (c *countingSession) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	c.n.Add(1)
	return c.Session.Shell(ctx, cmd, o)
}

// openLocal creates a session on the local bubblewrap backend.
func openLocal(t *testing.T) (session.Session, func() int) {
	s, err := local.Create(context.Background(), local.Options{
		StateDir: t.TempDir(), WorkspaceID: "ws", SessionID: strings.ToLower(t.Name()),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	c := &countingSession{Session: s}
	return c, func() int { return int(c.n.Load()) }
}

func openHost(t *testing.T) (session.Session, func() int) {
	h := sessiontest.NewHost(t)
	return h, func() int { return int(h.Calls()) }
}

// countingRunner counts msb invocations as they start; fakemsb's own log
// misses the ones the host kills.
type countingRunner struct {
	inner msb.Runner
	n     atomic.Int64
}

func (r *countingRunner) Run(ctx context.Context, c msb.Call) (*msb.Result, error) {
	r.n.Add(1)
	return r.inner.Run(ctx, c)
}

// openMsb creates a session on fakemsb.
func openMsb(t *testing.T) (session.Session, func() int) {
	env := fakemsbtest.New(t)
	runner := &countingRunner{inner: &msb.CLI{Path: env.Bin}}
	s, err := microvm.Create(context.Background(), microvm.Options{
		Client: msb.NewClient(runner), WorkspaceID: "ws-" + strings.ToLower(t.Name()), SessionID: "s1", Image: "debian",
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, s.Close(context.Background()))
		require.Empty(t, env.Sandboxes(t), "no sandbox left")
		require.Empty(t, env.Volumes(t), "no volume left")
	})
	return s, func() int { return int(runner.n.Load()) }
}
