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
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// globCall runs glob's builtin (whose script here differs on purpose, to
// tell which ran) with stdin, and returns its outcome.
func globCall(t *testing.T, s *microvm.Session, stdin string) string {
	t.Helper()
	res, err := s.Shell(context.Background(), session.Command{
		Script:  `echo "script ran in $2"; cat`,
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

// A call by one msb exec runs the agent's builtin when the sandbox has the
// agent: a session that placed it knows, an attached one finds out.
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

// An attached session whose sandbox has no agent runs the script, with the
// call's whole stdin, after msb could not start the agent; later calls go
// straight to their scripts.
func TestExecWithoutAgentRunsTheScript(t *testing.T) {
	env := fakemsbtest.New(t)
	created := createSession(t, options(env)) // NoAgent
	attached, err := microvm.Attach(options(env).Client, "", created.Name())
	require.NoError(t, err)
	attached.DisableAgentChannel()

	mark := len(env.Invocations(t))
	assert.Equal(t, `0 "script ran in /workspace\nkept stdin"`, globCall(t, attached, "kept stdin"))
	assert.Equal(t, []string{"/.oma-sandbox/agent", "/bin/bash"}, execArgv0s(t, env, mark))

	mark = len(env.Invocations(t))
	assert.Equal(t, `0 "script ran in /workspace\nagain"`, globCall(t, attached, "again"))
	assert.Equal(t, []string{"/bin/bash"}, execArgv0s(t, env, mark), "the session remembers")
	assert.Equal(t, microvm.Served{Exec: 2, ScriptFallbacks: 1}, attached.Served())

	// A session that made the sandbox without the agent never tries it.
	mark = len(env.Invocations(t))
	assert.Equal(t, `0 "script ran in /workspace\n"`, globCall(t, created, ""))
	assert.Equal(t, []string{"/bin/bash"}, execArgv0s(t, env, mark))
}

// While the session does not know, a call with more stdin than it would
// keep for a retry runs its script, with all of its stdin.
func TestExecUnknownAgentLargeStdin(t *testing.T) {
	env := fakemsbtest.New(t)
	o := channelOptions(t, env, "")
	created := createSession(t, o)
	attached, err := microvm.Attach(o.Client, "", created.Name())
	require.NoError(t, err)
	attached.DisableAgentChannel()
	big := strings.Repeat("x", 1<<20+1)
	mark := len(env.Invocations(t))
	res, err := attached.Shell(context.Background(), session.Command{Script: `wc -c`, Builtin: agentwire.BuiltinGlobEnumerate},
		session.ShellOptions{Stdin: strings.NewReader(big)})
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprint(len(big)), strings.TrimSpace(string(res.Stdout)))
	assert.Equal(t, []string{"/bin/bash"}, execArgv0s(t, env, mark))
}
