//go:build linux

package guestagent

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// A process's owner is its tag; a process with an empty environment is
// untagged (any call may take it); one with neither an environment nor
// arguments, caught mid-exec, is not known yet, so no call takes it.
func TestOwnerTag(t *testing.T) {
	start := func(env []string) int {
		cmd := exec.Command("sleep", "100")
		cmd.Env = env
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd.Process.Pid
	}
	tag, ok := ownerTag(start([]string{"A=1", bashproto.OwnerEnv + "=abc"}))
	assert.True(t, ok)
	assert.Equal(t, "abc", tag)
	_, ok = ownerTag(start([]string{}))
	assert.False(t, ok, "an empty environment is untagged")

	for _, c := range []struct {
		env, args string
		tag       string
		tagged    bool
	}{
		{"", "", "", true}, // mid-exec: not known yet
		{"", "sleep\x00", "", false},
		{"A=1\x00", "", "", false},
		{bashproto.OwnerEnv + "=x\x00", "", "x", true},
	} {
		tag, ok := ownerIn([]byte(c.env), []byte(c.args))
		assert.Equal(t, c.tagged, ok, "%q %q", c.env, c.args)
		assert.Equal(t, c.tag, tag, "%q %q", c.env, c.args)
	}
}
