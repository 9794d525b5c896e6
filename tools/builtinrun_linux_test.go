package tools

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// runBuiltin runs the guest agent's builtin name with args and stdin by
// its own process (`oma-guest-agent builtin NAME ARGS...`): as nobody when
// the test is root, in the same directory, given up after half a minute.
func runBuiltin(t *testing.T, name, stdin string, args ...string) builtinRun {
	t.Helper()
	return runBuiltinAs(t, builtinUser(), name, stdin, args...)
}

// runBuiltinAs is runBuiltin as user (nil: the test's own).
func runBuiltinAs(t *testing.T, user *syscall.Credential, name, stdin string, args ...string) builtinRun {
	t.Helper()
	agent := agenttest.AgentBinary(t) // built first: the build's time is not the builtin's
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, agent, append([]string{"builtin", name}, args...)...)
	cmd.Env = []string{}
	cmd.Stdin = strings.NewReader(stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: user}
	cmd.WaitDelay = time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "the builtin did not end")
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return builtinRun{code, out.String(), errb.String()}
}
