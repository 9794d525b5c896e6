package microvm

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
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

// execBuiltin runs the agent's builtin cmd.Builtin by one msb exec. Until
// the session has tried to replace an older agent or learnt that the agent
// is current (asksRevision), a call whose output does not stream asks the
// agent to refuse it when it is older than this program's revision; an
// agent that refuses, or lacks the builtin, is replaced (once per session)
// and the call sent again, with the same stdin. A streamed call is sent
// once, since its first answer went out. An agent that has the builtin
// but could not be replaced runs the call as it is.
func (s *Session) execBuiltin(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	again := opts.Stderr == nil && s.asksRevision()
	var stdin *replayable
	if again && opts.Stdin != nil {
		stdin = &replayable{r: opts.Stdin}
		opts.Stdin = stdin
	}
	res, err := s.execArgv(ctx, builtinArgv(cmd, again), opts)
	if agentMissing(err) {
		return nil, fmt.Errorf("%w: sandbox %s has none at %s (%w)", session.ErrNoAgent, s.names.Sandbox, agentGuestPath, err)
	}
	if err != nil || opts.Stderr != nil {
		return res, err
	}
	older, lacking := olderAnswer(res, cmd.Builtin, again)
	if older == "" {
		if again {
			s.agentIsCurrent() // it took the option: later calls need not ask, nor keep their stdin
		}
		return res, err
	}
	_, rerr := s.replaceAgent(ctx, older)
	if rerr != nil && lacking {
		return nil, s.lackingError(cmd.Builtin, rerr)
	}
	if !again {
		return res, err // the agent this session placed, or put in place before the call began
	}
	if stdin != nil {
		if opts.Stdin, err = stdin.again(); err != nil {
			return nil, fmt.Errorf("%w: the agent in sandbox %s is older than this program, and the call cannot be sent again: %w",
				session.ErrNoAgent, s.names.Sandbox, err)
		}
	}
	res, err = s.execArgv(ctx, builtinArgv(cmd, false), opts)
	if _, lacking := olderAnswer(res, cmd.Builtin, false); err == nil && rerr != nil && lacking {
		return nil, s.lackingError(cmd.Builtin, rerr)
	}
	return res, err
}

// lackingError is the error of a call of builtin, which the agent lacks
// and replacing it failed with rerr.
func (s *Session) lackingError(builtin string, rerr error) error {
	return fmt.Errorf("%w: the agent in sandbox %s does not offer %q: it is older than this program, and was not replaced: %w",
		session.ErrNoAgent, s.names.Sandbox, builtin, rerr)
}

// builtinArgv runs cmd's builtin by the agent, asking it for this
// program's revision when ask is set.
func builtinArgv(cmd session.Command, ask bool) []string {
	argv := []string{agentGuestPath, "builtin"}
	if ask {
		argv = append(argv, agentwire.RevisionOption())
	}
	return append(append(argv, cmd.Builtin), cmd.Args...)
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
