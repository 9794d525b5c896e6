package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// A call naming a builtin runs it in the guest agent, bound into its
// sandbox, as the guest user; the script, which would fail, never runs.
func TestCallsRunTheAgentsBuiltins(t *testing.T) {
	s := newTestSession(t, Options{WorkspaceID: "ws", SessionID: "agent", AgentFile: agenttest.AgentBinary(t)})
	ctx := context.Background()
	write := session.Command{Script: "exit 99", Builtin: "write", Args: []string{"/workspace/f.txt", "", "/workspace", "f.txt"}}
	res, err := s.Shell(ctx, write, session.ShellOptions{Stdin: strings.NewReader("body\n")})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)

	res, err = s.Shell(ctx, session.Command{Script: "exit 99", Builtin: "cat", Args: []string{"/workspace/f.txt", "/workspace", "f.txt"}}, session.ShellOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
	assert.Equal(t, "body\n", string(res.Stdout))

	fi, err := os.Stat(filepath.Join(s.dirs.Workspace, "f.txt"))
	require.NoError(t, err)
	if s.caps.Backend != "" && os.Geteuid() == 0 {
		assert.EqualValues(t, guestUID, fi.Sys().(*syscall.Stat_t).Uid, "the builtin wrote as the guest user")
	}

	res, err = s.Shell(ctx, session.Command{Script: `echo script`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "script\n", string(res.Stdout), "a call without a builtin runs its script")
	assert.Equal(t, Served{Builtins: map[string]int{"write": 1, "cat": 1}, Scripts: 1}, s.Served())

	// The agent is the sandbox's, read-only to the command.
	res, err = s.Shell(ctx, session.Command{Script: `: > ` + agentGuestPath + ` && echo replaced`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, 0, res.ExitCode)
	assert.NotContains(t, string(res.Stdout), "replaced")
}

// Without an agent a call runs its script, and is counted as a fallback.
func TestNoAgentRunsScripts(t *testing.T) {
	s := newTestSession(t, Options{WorkspaceID: "ws", SessionID: "noagent", NoAgent: true})
	res, err := s.Shell(context.Background(), session.Command{Script: "echo script", Builtin: "cat"}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "script\n", string(res.Stdout))
	assert.Equal(t, Served{Scripts: 1, ScriptFallbacks: 1}, s.Served())
}

// An agent file that cannot be read is refused at Create, which names it
// and leaves nothing behind.
func TestUnreadableAgentFile(t *testing.T) {
	state := t.TempDir()
	missing := filepath.Join(t.TempDir(), "no-agent")
	_, err := Create(context.Background(), Options{StateDir: state, WorkspaceID: "ws", SessionID: "badagent", AgentFile: missing})
	require.ErrorIs(t, err, session.ErrInvalid)
	assert.ErrorContains(t, err, missing)
	left, err := os.ReadDir(state)
	require.NoError(t, err)
	assert.Empty(t, left)
}
