package microvm_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// globCall runs glob's builtin with stdin, and returns its outcome.
func globCall(t *testing.T, s *microvm.Session, stdin string) string {
	t.Helper()
	res, err := s.Shell(context.Background(), session.Command{
		Args:    []string{"tok", "/workspace", "MARK", "0", "", ""},
		Builtin: agentwire.BuiltinGlobEnumerate,
	}, session.ShellOptions{Stdin: strings.NewReader(stdin)})
	require.NoError(t, err)
	return fmt.Sprintf("%d %q", res.ExitCode, res.Stdout)
}

// execArgv0s lists the programs of the msb execs logged since mark.
func execArgv0s(t *testing.T, env *fakemsbtest.Env, mark int) []string {
	t.Helper()
	var out []string
	for _, inv := range env.Invocations(t)[mark:] {
		if i := slices.Index(inv.Argv, "--"); inv.Argv[0] == "exec" && i >= 0 {
			out = append(out, inv.Argv[i+1])
		}
	}
	return out
}

// A call by one msb exec runs the agent's builtin, in a session that
// placed the agent and in one attached to its sandbox.
func TestExecRunsTheAgentsBuiltin(t *testing.T) {
	env := fakemsbtest.New(t)
	o := channelOptions(t, env, "")
	created := createSession(t, o)
	created.DisableAgentChannel()
	mark := len(env.Invocations(t))
	assert.Equal(t, `0 "MARK\x00"`, globCall(t, created, ""))
	assert.Equal(t, []string{"/.oma-sandbox/agent"}, execArgv0s(t, env, mark))

	attached, err := microvm.Attach(o.Client, "", created.Name())
	require.NoError(t, err)
	attached.DisableAgentChannel()
	mark = len(env.Invocations(t))
	assert.Equal(t, `0 "MARK\x00"`, globCall(t, attached, ""))
	assert.Equal(t, []string{"/.oma-sandbox/agent"}, execArgv0s(t, env, mark))

	want := microvm.Served{Exec: 1, Builtins: map[string]int{agentwire.BuiltinGlobEnumerate: 1}}
	assert.Equal(t, want, created.Served())
	assert.Equal(t, want, attached.Served())
	assert.Empty(t, env.Channel(created.Name()).Agents, "no channel was opened")
}

// bareSandbox makes a session sandbox without the agent, as a create by
// other means (an older program, msb itself) does, and attaches to it.
func bareSandbox(t *testing.T, env *fakemsbtest.Env) *microvm.Session {
	t.Helper()
	client := options(env).Client
	names := session.NewNames("", "ws", "bare", fixedNow, 1)
	ctx := context.Background()
	require.NoError(t, client.Create(ctx, msb.CreateOptions{Name: names.Sandbox, Image: "debian", Quiet: true,
		Mounts: []msb.NamedMount{{Volume: names.Volume, Guest: "/workspace"}}}))
	s, err := microvm.Attach(client, "", names.Sandbox)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(ctx) })
	return s
}

// A sandbox without the agent runs no tool call: a builtin fails with
// session.ErrNoAgent, naming the sandbox, by one exec and over a channel
// that could not open; a command of the caller's own still runs.
func TestCallsWithoutAgentFail(t *testing.T) {
	for _, transport := range []string{"exec", "channel"} {
		t.Run(transport, func(t *testing.T) {
			env := fakemsbtest.New(t)
			s := bareSandbox(t, env)
			if transport == "exec" {
				s.DisableAgentChannel()
			}
			_, err := s.Shell(context.Background(), session.Command{Builtin: agentwire.BuiltinGlobEnumerate,
				Args: []string{"tok", "/workspace", "MARK", "0", "", ""}}, session.ShellOptions{})
			require.ErrorIs(t, err, session.ErrNoAgent)
			assert.Contains(t, err.Error(), s.Name())
			assert.Equal(t, "hi\n", sh(t, s, "echo hi"))
			assert.Equal(t, microvm.Served{Exec: 1}, s.Served(), "the failed call is not counted as served")
		})
	}
}
