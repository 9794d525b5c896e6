//go:build linux

package guestagent

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// A process's owner is its tag, read even right after it started, while
// its exec may not have set its environment up yet; a process with an
// empty environment is untagged (any call may take it).
func TestOwnerTag(t *testing.T) {
	start := func(env []string) int {
		cmd := exec.Command("sleep", "100")
		cmd.Env = env
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd.Process.Pid
	}
	for range 20 {
		tag, ok := ownerTag(start([]string{"A=1", bashproto.OwnerEnv + "=abc"}))
		require.True(t, ok)
		require.Equal(t, "abc", tag)
		_, ok = ownerTag(start([]string{}))
		require.False(t, ok, "an empty environment is untagged")
	}
	for env, want := range map[string]string{"": "", "A=1\x00": "", bashproto.OwnerEnv + "=x\x00": "x", "A=1\x00" + bashproto.OwnerEnv + "=y\x00": "y"} {
		tag, ok := ownerIn([]byte(env))
		assert.Equal(t, want != "", ok, "%q", env)
		assert.Equal(t, want, tag, "%q", env)
	}
}
