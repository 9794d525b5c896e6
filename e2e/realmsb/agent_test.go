//go:build linux

package realmsb_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// TestRealMSBReplacesAnOlderAgent: a sandbox whose agent is older than
// this program (one lacking the ls and write builtins, as an older
// oma-sandbox placed it) gets this program's agent from the first session
// attached to it that meets it: by one exec per call (the one-shot CLI's
// way), whose call is sent again with its stdin, and on the channel's
// first open. The agent installed lasts across a stop and a start (the
// root disk keeps it). Real msb only: fakemsb's root is a tmpfs, and the
// fakemsb side is session/microvm's TestAnOlderAgentIsReplaced tests.
func TestRealMSBReplacesAnOlderAgent(t *testing.T) {
	tg := realTarget(t)
	ctx := context.Background()
	olderAgent := agenttest.OlderAgentBinary(t)
	fi, err := os.Stat(olderAgent)
	require.NoError(t, err)
	olderSize := strconv.FormatInt(fi.Size(), 10) + "\n"
	tg.agentFile = olderAgent
	older := tg.create(t, "olderagent")
	// The size of the agent at its path, by a call of s with the guest's
	// page cache dropped first. agentSize asks the creating session, whose
	// channel's agent, started first, runs from the file the first
	// replacement renamed over: it must still page its code in.
	agentSizeBy := func(s session.Session) string {
		t.Helper()
		res, err := s.Shell(ctx, session.Command{Script: "sync; echo 3 >/proc/sys/vm/drop_caches; stat -c %s /.oma-sandbox/agent; ls -A /.oma-sandbox >&2"}, session.ShellOptions{User: "0"})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
		assert.NotContains(t, string(res.Stderr), "agent.new-", "nothing staged is left")
		return string(res.Stdout)
	}
	agentSize := func() string { t.Helper(); return agentSizeBy(older) }
	require.Equal(t, olderSize, agentSize())

	exec, err := microvm.Attach(tg.client, "", older.Name())
	require.NoError(t, err)
	exec.DisableAgentChannel()
	toolCall(t, exec, "write", map[string]any{"path": "notes.txt", "content": "alpha\n"})
	assert.Contains(t, toolCall(t, exec, "ls", map[string]any{"path": "."}), "notes.txt")
	assert.Equal(t, 2, exec.Served().Exec)
	assert.NotEqual(t, olderSize, agentSize(), "the agent was replaced")

	// The older agent back in its place, as root copies it.
	require.NoError(t, older.CopyIn(ctx, olderAgent, "/.oma-sandbox/agent.back"))
	res, err := older.Shell(ctx, session.Command{Script: "mv /.oma-sandbox/agent.back /.oma-sandbox/agent"}, session.ShellOptions{User: "0"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	require.Equal(t, olderSize, agentSize())

	channel, err := microvm.Attach(tg.client, "", older.Name())
	require.NoError(t, err)
	t.Cleanup(channel.DisableAgentChannel)
	assert.Contains(t, toolCall(t, channel, "ls", map[string]any{"path": "."}), "notes.txt")
	toolCall(t, channel, "write", map[string]any{"path": "more.txt", "content": "beta\n"})
	requireOnChannel(t, channel)
	replaced := agentSize()
	assert.NotEqual(t, olderSize, replaced, "the agent was replaced")
	requireOnChannel(t, older)

	// (The stop ends the creating session's channel under it.)
	require.NoError(t, channel.Pause(ctx))
	require.NoError(t, channel.Resume(ctx))
	again, err := microvm.Attach(tg.client, "", older.Name())
	require.NoError(t, err)
	again.DisableAgentChannel()
	assert.Equal(t, replaced, agentSizeBy(again), "the root disk kept the new agent")
	assert.Equal(t, "beta\n", toolCall(t, again, "read", map[string]any{"path": "more.txt"}))
	assert.Contains(t, toolCall(t, again, "ls", map[string]any{"path": "."}), "more.txt")
}
