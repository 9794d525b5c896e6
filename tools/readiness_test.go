package tools_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// faulty is a session whose calls of one builtin get fault's answer
// instead of running.
type faulty struct {
	session.Session
	builtins []string
	fault    func(ctx context.Context) (*session.Result, error)
}

func (f *faulty) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	if slices.Contains(f.builtins, cmd.Builtin) {
		return f.fault(ctx)
	}
	return f.Session.Shell(ctx, cmd, o)
}

// msbSession is a session on fakemsb over the guest agent's channel, and
// a toolbox on it whose calls of builtins get fault's answer.
func msbSession(t *testing.T, fault func(ctx context.Context) (*session.Result, error), builtins ...string) (*fakemsbtest.Env, *microvm.Session, *tools.Toolbox) {
	env := fakemsbtest.New(t)
	s, err := microvm.Create(context.Background(), microvm.Options{
		Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "ws", SessionID: "s", Image: "debian",
		AgentFile: agenttest.AgentBinary(t),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return env, s, tools.New(&faulty{Session: s, builtins: builtins, fault: fault}, tools.Options{})
}

// agentLost is the answer of a call whose guest agent went away.
func agentLost(context.Context) (*session.Result, error) {
	return &session.Result{ExitCode: 1, Stderr: []byte("error: guest agent lost\n")}, nil
}

// workspaceKept checks that a poisoned msb session still has the agent's
// files: its volume is there and, attached again, shows the file.
func workspaceKept(t *testing.T, env *fakemsbtest.Env, s *microvm.Session) {
	t.Helper()
	assert.Equal(t, []string{s.Names().Volume}, env.Volumes(t), "poisoning keeps the workspace volume")
	again, err := microvm.Attach(msb.NewClient(&msb.CLI{Path: env.Bin}), "", s.Name())
	require.NoError(t, err)
	assert.Equal(t, "kept\n", sh(t, again, `cat /workspace/notes.txt`), "and the agent's files in it")
}

// A guest that ends before publishing readiness leaves its state unknown:
// the session is poisoned, its sandbox stopped, its volume kept.
func TestSearchWithoutReadinessPoisons(t *testing.T) {
	for _, tool := range []string{"glob", "grep"} {
		t.Run(tool, func(t *testing.T) {
			env, s, tb := msbSession(t, agentLost, agentwire.BuiltinGlobEnumerate, agentwire.BuiltinGrepSearch)
			sh(t, s, `echo kept > notes.txt`)
			input := `{"pattern": "*"}`
			if tool == "grep" {
				input = `{"pattern": "x", "path": "/workspace"}`
			}
			_, err := tb.Call(context.Background(), tool, []byte(input), nil)
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), strings.ToUpper(tool[:1])+tool[1:]+" process did not publish readiness\n"), err.Error())
			assert.ErrorIs(t, err, session.ErrPoisoned)
			assert.Contains(t, err.Error(), s.Names().Volume, "the error says where the files are")
			assert.True(t, s.Poisoned())

			_, err = tb.Call(context.Background(), "read", []byte(`{"path": "notes.txt"}`), nil)
			assert.ErrorIs(t, err, session.ErrPoisoned, "a poisoned session starts nothing")
			workspaceKept(t, env, s)
		})
	}
}

// A search out of time before its guest was ready poisons the session as
// well, and says that it ran out of time.
func TestSearchTimeoutBeforeReadinessSaysSo(t *testing.T) {
	for _, tool := range []string{"glob", "grep"} {
		t.Run(tool, func(t *testing.T) {
			timedOut := func(context.Context) (*session.Result, error) {
				return &session.Result{ExitCode: 137}, session.ErrGuestTimeout
			}
			_, s, tb := msbSession(t, timedOut, agentwire.BuiltinGlobEnumerate, agentwire.BuiltinGrepSearch)
			input := `{"pattern": "*"}`
			if tool == "grep" {
				input = `{"pattern": "x", "path": "/workspace"}`
			}
			_, err := tb.Call(context.Background(), tool, []byte(input), nil)
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), strings.ToUpper(tool[:1])+tool[1:]+" timed out after "), err.Error())
			assert.Contains(t, err.Error(), "before the guest was ready")
			assert.ErrorIs(t, err, session.ErrGuestTimeout)
			assert.ErrorIs(t, err, glob.ErrNotReady)
			assert.ErrorIs(t, err, session.ErrPoisoned)
			assert.True(t, s.Poisoned())
		})
	}
}

// Ready, capped, and the cleanup fails: the guest may still run tagged work,
// so the session is poisoned and the cleanup error returned.
func TestSearchCleanupFailurePoisons(t *testing.T) {
	env, s, tb := msbSession(t, agentLost, agentwire.BuiltinSearchKill)
	sh(t, s, `echo kept > notes.txt; mkdir many && cd many && for i in $(seq 1 150); do : > "f$i"; done`)
	_, err := tb.Call(context.Background(), "glob", []byte(`{"pattern": "many/*"}`), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "glob cleanup")
	assert.ErrorIs(t, err, session.ErrPoisoned)
	assert.True(t, s.Poisoned())
	workspaceKept(t, env, s)
}

// Ready, capped, and the cleanup finds the session removed from elsewhere:
// nothing runs on, so nothing is poisoned, and the matches found stand.
func TestSearchCleanupOfAGoneSession(t *testing.T) {
	gone := func(context.Context) (*session.Result, error) { return nil, session.ErrGone }
	_, s, tb := msbSession(t, gone, agentwire.BuiltinSearchKill)
	sh(t, s, `mkdir many && cd many && for i in $(seq 1 150); do : > "f$i"; done`)
	text, err := tb.Call(context.Background(), "glob", []byte(`{"pattern": "many/*"}`), nil)
	require.NoError(t, err)
	assert.Contains(t, text, "many/f")
	assert.False(t, s.Poisoned())
}

// A caller that gives up before the guest is ready poisons the session too,
// and that keeps the workspace as well.
func TestSearchAbortBeforeReadinessPoisons(t *testing.T) {
	hang := func(ctx context.Context) (*session.Result, error) {
		<-ctx.Done()
		return nil, session.ErrAborted
	}
	env, s, tb := msbSession(t, hang, agentwire.BuiltinGlobEnumerate)
	sh(t, s, `echo kept > notes.txt`)
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
	workspaceKept(t, env, s)
}

// An agent's `chmod -R 644 /workspace` makes the next glob fail before its
// guest is ready. On the local backend Poison ends the resident sandbox
// with every process in it, so nothing is unknown: the session is not left
// poisoned and the agent can repair its mistake. (msb's poisoning keeps the files: the
// tests above.)
func TestUnreadableWorkspaceDoesNotPoisonLocal(t *testing.T) {
	s, _ := openLocal(t)
	tb := tools.New(s, tools.Options{})
	sh(t, s, `echo kept > notes.txt; chmod -R 644 /workspace; exit 0`)
	_, err := tb.Call(context.Background(), "glob", []byte(`{"pattern": "*"}`), nil)
	require.Error(t, err)
	assert.NotErrorIs(t, err, session.ErrPoisoned, "nothing is left running, so nothing is unknown")
	assert.False(t, s.Poisoned())
	res, err := s.Shell(context.Background(), session.Command{Script: `chmod -R a+rwX /workspace`}, session.ShellOptions{User: "0"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, string(res.Stderr))
	assert.Equal(t, "kept\n", sh(t, s, `cat /workspace/notes.txt`))
	out, err := tb.Call(context.Background(), "glob", []byte(`{"pattern": "*.txt"}`), nil)
	require.NoError(t, err, "the session goes on")
	assert.Contains(t, string(out), "notes.txt")
}

// A caller that gives up before the guest is ready poisons the msb
// session; poisoning closes the guest agent's channel (openMsbChannel's
// cleanup checks that nothing of it runs).
func TestReadinessOverTheChannel(t *testing.T) {
	for _, b := range []backend{{name: "msb-channel", open: openMsbChannel}} {
		t.Run(b.name+"/abort", func(t *testing.T) {
			s, _ := b.open(t)
			tb := tools.New(s, tools.Options{})
			sh(t, s, `echo kept > notes.txt`)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := tb.Call(ctx, "grep", []byte(`{"pattern": "x", "path": "/workspace"}`), nil)
				done <- err
			}()
			cancel()
			err := <-done
			assert.ErrorIs(t, err, session.ErrAborted)
			assert.True(t, s.Poisoned())
		})
	}
}

// An agent's `chmod -R 644 /workspace` gets a plain answer over the guest
// agent's channel: the agent enters the workdir as root before it switches
// to the call's user, so the glob runs, finds its path unreadable and says
// so. Nothing is unknown: the session is not poisoned and keeps its files.
func TestUnreadableWorkspaceOverTheChannel(t *testing.T) {
	for _, b := range []backend{{name: "msb-channel", open: openMsbChannel}} {
		t.Run(b.name, func(t *testing.T) {
			s, _ := b.open(t)
			tb := tools.New(s, tools.Options{})
			sh(t, s, `echo kept > notes.txt; chmod -R 644 /workspace; exit 0`)
			_, err := tb.Call(context.Background(), "glob", []byte(`{"pattern": "*"}`), nil)
			require.Error(t, err)
			assert.Equal(t, "Path not found: /workspace", err.Error())
			assert.False(t, s.Poisoned())
		})
	}
}
