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

// execBuiltin runs the agent's builtin cmd.Builtin by one msb exec. An
// agent older than this program that lacks it is replaced (once per
// session), and the call sent again, with the same stdin; a call whose
// output streams is not, since its first answer went out.
func (s *Session) execBuiltin(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	argv := append([]string{agentGuestPath, "builtin", cmd.Builtin}, cmd.Args...)
	// Only until the session has tried a replacement can a call go twice.
	tried, _ := s.replacementState()
	again := opts.Stderr == nil && !tried
	var stdin *replayable
	if again && opts.Stdin != nil {
		stdin = &replayable{r: opts.Stdin}
		opts.Stdin = stdin
	}
	res, err := s.execArgv(ctx, argv, opts)
	if agentMissing(err) {
		return nil, fmt.Errorf("%w: sandbox %s has none at %s (%w)", session.ErrNoAgent, s.names.Sandbox, agentGuestPath, err)
	}
	if err != nil || opts.Stderr != nil || !lacksBuiltin(res, cmd.Builtin) {
		return res, err
	}
	if _, rerr := s.replaceAgent(ctx, "it lacks "+cmd.Builtin); rerr != nil {
		return nil, fmt.Errorf("%w: the agent in sandbox %s does not offer %q: it is older than this program, and was not replaced: %w",
			session.ErrNoAgent, s.names.Sandbox, cmd.Builtin, rerr)
	}
	if !again {
		return res, err // the agent this session placed, or put in place before the call began
	}
	if stdin != nil {
		if opts.Stdin, err = stdin.again(); err != nil {
			return nil, fmt.Errorf("%w: the agent in sandbox %s, older than this program, was replaced, but the call cannot be sent again: %w",
				session.ErrNoAgent, s.names.Sandbox, err)
		}
	}
	return s.execArgv(ctx, argv, opts)
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
