package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
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
	want := Served{Builtins: map[string]int{"write": 1, "cat": 1}, Scripts: 1}
	if s.caps.Backend != "" {
		want.Resident = 3 // the session's resident sandbox ran them
	}
	assert.Equal(t, want, s.Served())

	// A bash call's command runs beside the agent that supervises it: the
	// agent is bound read-only there (the mount says so whoever owns the
	// file), and the command cannot replace it.
	out, err := tools.New(s, tools.Options{}).Bash(ctx,
		`grep -F ' `+agentGuestPath+` ' /proc/self/mountinfo; : > `+agentGuestPath+` && echo replaced`, 10*time.Second, nil)
	var cmdErr *tools.CommandError
	require.ErrorAs(t, err, &cmdErr, "%s", out)
	assert.NotContains(t, cmdErr.Text, "replaced")
	fields := strings.Fields(cmdErr.Text)
	require.Greater(t, len(fields), 5, "no mount at %s: %q", agentGuestPath, cmdErr.Text)
	assert.Contains(t, strings.Split(fields[5], ","), "ro", "mount options of %s: %q", agentGuestPath, cmdErr.Text)
}

// A builtin the resident sandbox's agent does not offer (an older agent,
// started by another program) runs in a sandbox of its own, by this
// program's agent, which answers for it.
func TestABuiltinTheResidentAgentLacksRunsPerCall(t *testing.T) {
	s := newTestSession(t, Options{WorkspaceID: "ws", SessionID: "lacks"})
	if s.caps.Backend == "" {
		t.Skip("no working bubblewrap sandbox here")
	}
	assert.Equal(t, "hi\n", rsh(t, s, "echo hi"))
	resident := s.Served().Resident
	if resident == 0 {
		t.Skip("no resident sandbox on this host")
	}
	res, err := s.Shell(context.Background(), session.Command{Builtin: "no-such-builtin"}, session.ShellOptions{})
	require.NoError(t, err)
	assert.NotZero(t, res.ExitCode)
	assert.Contains(t, string(res.Stderr), "no-such-builtin", "the per-call agent's answer")
	n := s.Served()
	assert.Equal(t, resident, n.Resident, "not run by the resident sandbox")
	assert.Equal(t, 1, n.Builtins["no-such-builtin"])
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
