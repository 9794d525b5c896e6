package tools_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// allBackends is every Session implementation the tool suite can run
// against. The real ones boot microVMs on the real msb and the guest image
// (internal/realvm): scripts/real-vm.sh runs the suite on them.
var allBackends = []backend{
	{name: "host", open: openHost},
	{name: "msb", open: openMsb},
	{name: "msb-channel", open: openMsbChannel},
	{name: "local", open: openLocal},
	{name: "local-per-call", open: openLocalPerCall},
	{name: "real-msb", open: openRealMsb},
	{name: "real-msb-channel", open: openRealMsbChannel},
}

// backends is what the suite runs on: OMA_TEST_BACKENDS, a comma-separated
// list of allBackends' names, or every backend but the real ones.
var backends = selectBackends(realvm.Backends())

func selectBackends(names []string) []backend {
	if names == nil {
		return allBackends[:5]
	}
	var chosen []backend
	for _, name := range names {
		i := slices.IndexFunc(allBackends, func(b backend) bool { return b.name == name })
		if i < 0 {
			panic(fmt.Sprintf("OMA_TEST_BACKENDS names %q, which is not one of the tool suite's backends", name))
		}
		chosen = append(chosen, allBackends[i])
	}
	return chosen
}

// guestSeconds is n seconds of a guest's time: more on a real VM, which
// the suite may run under software emulation, where starting a process
// takes a good part of a second.
func guestSeconds(t *testing.T, n int) int {
	if onRealVM(t) {
		return 10 * n
	}
	return n
}

// onRealVM tells whether t, a test forEachBackend started, runs on one of
// the real msb's backends.
func onRealVM(t *testing.T) bool {
	return strings.HasPrefix(t.Name()[strings.LastIndexByte(t.Name(), '/')+1:], "real-")
}

// onBackend tells whether t, a test forEachBackend started, runs on the
// backend of that kind: real-msb is an msb backend as fakemsb's is.
func onBackend(t *testing.T, kind string) bool {
	name := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]
	return strings.TrimPrefix(name, "real-") == kind
}

// sharesSandbox tells whether s's calls run in one long-lived sandbox,
// where a background process outlives its call: msb's, and a local
// session's resident sandbox.
func sharesSandbox(s session.Session) bool {
	scoped, ok := s.(interface{ ProcessesEndWithCall() bool })
	return !ok || !scoped.ProcessesEndWithCall()
}

// agentOutOfSight tells whether s's commands cannot see the agent that
// starts them: a local session's resident sandbox where oma-sandbox is not
// root keeps the agent out of its commands' pid namespace, so their
// parent's pid reads 0 (docs/guest-agent.md).
func agentOutOfSight(t *testing.T, s session.Session) bool {
	return onBackend(t, "local") && sharesSandbox(s) && os.Geteuid() != 0
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

func (c *countingSession) OperationTimeout() time.Duration {
	timed, ok := c.Session.(interface{ OperationTimeout() time.Duration })
	if !ok {
		return 0
	}
	return timed.OperationTimeout()
}

func (c *countingSession) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	c.n.Add(1)
	return c.Session.Shell(ctx, cmd, o)
}

// openLocal creates a session on the local bubblewrap backend, whose calls
// run the guest agent's builtins (in the session's resident sandbox where
// the host can start one): a call that names one and runs its script
// instead fails the test.
func openLocal(t *testing.T) (session.Session, func() int) {
	return newLocal(t, false)
}

// openLocalPerCall is openLocal with a sandbox of its own for every call,
// as root's calls and a session made with SandboxPerCall run.
func openLocalPerCall(t *testing.T) (session.Session, func() int) {
	return newLocal(t, true)
}

func newLocal(t *testing.T, perCall bool) (session.Session, func() int) {
	s, err := local.Create(context.Background(), local.Options{
		StateDir: t.TempDir(), WorkspaceID: "ws", SessionID: strings.ToLower(t.Name()),
		AgentFile: agenttest.AgentBinary(t), SandboxPerCall: perCall,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, s.Close(context.Background()))
	})
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

// openMsb creates a session on fakemsb that makes one msb exec per call.
func openMsb(t *testing.T) (session.Session, func() int) {
	env := fakemsbtest.New(t)
	runner := &countingRunner{inner: &msb.CLI{Path: env.Bin}}
	s, err := microvm.Create(context.Background(), microvm.Options{
		Client: msb.NewClient(runner), WorkspaceID: "ws-" + strings.ToLower(t.Name()), SessionID: "s1", Image: "debian",
		NoChannel: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, s.Close(context.Background()))
		require.Empty(t, env.Sandboxes(t), "no sandbox left")
		require.Empty(t, env.Volumes(t), "no volume left")
	})
	return s, func() int { return int(runner.n.Load()) }
}

// openMsbChannel creates a session on fakemsb whose calls travel over the
// guest agent's channel; a round trip is a call on it. Its cleanup checks
// that they did: past the create, msb ran only the channel's inspect and
// exec --stream (once, or again after a pause), never an exec of its own.
func openMsbChannel(t *testing.T) (session.Session, func() int) {
	env := fakemsbtest.New(t)
	s, err := microvm.Create(context.Background(), microvm.Options{
		Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "ws-" + strings.ToLower(t.Name()), SessionID: "s1", Image: "debian",
		AgentFile: agenttest.AgentBinary(t),
	})
	require.NoError(t, err)
	env.ResetLog(t)
	t.Cleanup(func() {
		poisoned := s.Poisoned()
		require.NoError(t, s.Close(context.Background()))
		require.True(t, env.Channel(s.Name()).Empty(), "channel processes left: %+v", env.Channel(s.Name()))
		require.Empty(t, env.Sandboxes(t), "no sandbox left")
		require.Empty(t, env.Volumes(t), "no volume left")
		if poisoned {
			return // its poisoning found the sandbox stopped with one inspect
		}
		for _, inv := range env.Invocations(t) {
			if inv.Argv[0] == "exec" {
				require.Contains(t, inv.Argv, "--stream", "a call left the channel: %q", inv.Argv)
			}
		}
	})
	c := &countingSession{Session: s}
	return c, func() int { return int(c.n.Load()) }
}

// openRealMsb gives the test a session on the real msb that makes one msb
// exec per call; openRealMsbChannel one whose calls travel on the guest
// agent's channel and run its builtins. Either fails its test when a call
// went another way (see realvm.Open).
func openRealMsb(t *testing.T) (session.Session, func() int) {
	return realvm.Open(t, false)
}

func openRealMsbChannel(t *testing.T) (session.Session, func() int) {
	return realvm.Open(t, true)
}
