package fakemsbtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnvLifecycle(t *testing.T) {
	env := New(t)
	fi, err := os.Stat(env.Bin)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&0o111, "wrapper must be executable")

	_, stderr, code := env.Run(t, "create", "alpine", "-n", "box", "--mount-named", "vol:/workspace", "-q")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, []string{"box"}, env.Sandboxes(t))
	assert.Equal(t, []string{"vol"}, env.Volumes(t))
	assert.Len(t, env.Holders(), 2, "outer bwrap and the sandbox init")

	stdout, _, code := env.Run(t, "exec", "box", "--", "sh", "-c", "echo hi; exit 3")
	assert.Equal(t, 3, code)
	assert.Equal(t, "hi\n", stdout)

	invs := env.Invocations(t)
	require.Len(t, invs, 2)
	assert.Equal(t, []string{"exec", "box", "--", "sh", "-c", "echo hi; exit 3"}, invs[1].Argv)
	assert.Equal(t, 3, invs[1].Exit)
	assert.GreaterOrEqual(t, invs[1].Ms, 0.0)

	env.ResetLog(t)
	assert.Empty(t, env.Invocations(t))
}

func TestSetKnob(t *testing.T) {
	env := New(t)
	env.SetKnob("FAKEMSB_FAULTS", "list=exit:9:error: injected")
	_, stderr, code := env.Run(t, "list", "--format", "json")
	assert.Equal(t, 9, code)
	assert.Equal(t, "error: injected\n", stderr)

	env.SetKnob("FAKEMSB_FAULTS", "")
	env.SetKnob("FAKEMSB_NOW", "2026-08-22T14:49:44.123Z")
	_, _, code = env.Run(t, "volume", "create", "v1", "-q")
	require.Equal(t, 0, code)
	stdout, _, code := env.Run(t, "volume", "list", "--format", "json")
	require.Equal(t, 0, code)
	assert.True(t, strings.Contains(stdout, `"created_at": "2026-08-22T14:49:44.123+00:00"`), stdout)
}

func TestCleanupRemovesSandboxes(t *testing.T) {
	var home string
	t.Run("inner", func(t *testing.T) {
		env := New(t)
		home = env.Home
		// A fault that would break remove must not break the cleanup.
		env.SetKnob("FAKEMSB_FAULTS", "remove=exit:1:error: nope")
		_, stderr, code := env.Run(t, "create", "alpine", "-n", "leaky", "-q")
		require.Equal(t, 0, code, stderr)
	})
	assert.Empty(t, holders(home))

}

func TestCleanupKillsUnrecordedHolders(t *testing.T) {
	outer := t
	var home string
	done := make(chan struct{})
	t.Run("inner", func(t *testing.T) {
		env := New(t)
		home = env.Home
		// Stands in for a holder whose create was killed before recording
		// it. It waits in the shell's own read, never forking: a forked
		// child carries the parent's command line until it execs, so a
		// looping `sleep` would sometimes count as a second holder.
		r, w, err := os.Pipe()
		require.NoError(t, err)
		outer.Cleanup(func() { _ = w.Close() }) // after the check below
		cmd := exec.Command("sh", "-c", "read -r line", "FAKEMSB_HOLDER", env.Home+"|ghost")
		cmd.Stdin = r
		require.NoError(t, cmd.Start())
		_ = r.Close()
		go func() { _ = cmd.Wait(); close(done) }()
		require.Equal(t, []int{cmd.Process.Pid}, env.Holders())
	})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the unrecorded holder was not killed")
	}
	assert.Empty(t, holders(home))
}
