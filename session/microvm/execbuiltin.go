package microvm

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// exec runs a call by one msb exec: `AGENT builtin NAME ARGS...` when the
// call names a builtin, else its script. A sandbox without the agent (one
// attached to that was made by other means) fails builtin calls with
// session.ErrNoAgent: no other program runs the tools.
func (s *Session) exec(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	if cmd.Builtin == "" {
		s.served.exec("")
		return s.execArgv(ctx, scriptArgv(cmd.Script, cmd.Args), opts)
	}
	res, err := s.execBuiltin(ctx, cmd, opts)
	if !errors.Is(err, session.ErrNoAgent) {
		s.served.exec(cmd.Builtin)
	}
	return res, err
}

// execBuiltin runs the agent's builtin cmd.Builtin by one msb exec.
func (s *Session) execBuiltin(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	res, err := s.execArgv(ctx, append([]string{agentGuestPath, "builtin", cmd.Builtin}, cmd.Args...), opts)
	if agentMissing(err) {
		return nil, fmt.Errorf("%w: sandbox %s has none at %s (%w)", session.ErrNoAgent, s.names.Sandbox, agentGuestPath, err)
	}
	return res, err
}

// agentMissing tells msb's answer to an exec of an agent that is not at
// agentGuestPath (or not executable) from the builtin's own outcome.
func agentMissing(err error) bool {
	var exitErr *msb.ExitError
	return errors.As(err, &exitErr) && (exitErr.ExitCode == 127 || exitErr.ExitCode == 126) &&
		strings.HasPrefix(exitErr.Message, `failed to exec "`+agentGuestPath+`"`)
}

// scriptArgv runs script by bash with args as "$1".."$N".
func scriptArgv(script string, args []string) []string {
	return append([]string{"/bin/bash", "-c", script, "bash"}, args...)
}
