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

// agentRuns says the guest agent runs here, so its builtins can be tested.
const agentRuns = true

// runBuiltin runs the guest agent's builtin name with args and stdin, as
// runScript runs a script: as nobody when the test is root, in the same
// directory, given up after half a minute.
func runBuiltin(t *testing.T, name, stdin string, args ...string) scriptRun {
	t.Helper()
	return runBuiltinAs(t, scriptUser(), name, stdin, args...)
}

// runBuiltinAs is runBuiltin as user (nil: the test's own).
func runBuiltinAs(t *testing.T, user *syscall.Credential, name, stdin string, args ...string) scriptRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, agenttest.AgentBinary(t), append([]string{"builtin", name}, args...)...)
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
	return scriptRun{code, out.String(), errb.String()}
}
