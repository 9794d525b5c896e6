package microvm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// agentPresence is what a session knows of the guest agent in its
// sandbox, for calls that go by one msb exec each.
type agentPresence int

const (
	agentUnknown agentPresence = iota // attached: the first builtin call finds out
	agentPresent
	agentAbsent
	// agentDistrusted: the sandbox had the agent, but its channel failed
	// for good (it died twice, or would not open): it may have been
	// replaced, so calls run their scripts, counted as fallbacks.
	agentDistrusted
)

// maxRetryStdin bounds the stdin a builtin call keeps, while the session
// does not know whether its sandbox has the agent, to give the script if
// the agent is missing; a call with more stdin runs its script.
const maxRetryStdin = 1 << 20

func (s *Session) presence() agentPresence {
	s.ch.mu.Lock()
	defer s.ch.mu.Unlock()
	return s.ch.agent
}

// learnPresence records what a first builtin call found, unless the
// channel decided meanwhile (distrust must not be undone).
func (s *Session) learnPresence(p agentPresence) {
	s.ch.mu.Lock()
	if s.ch.agent == agentUnknown {
		s.ch.agent = p
	}
	s.ch.mu.Unlock()
}

// distrustAgentLocked stops one exec per call from running the agent the
// channel gave up on. ch.mu must be held.
func (ch *channel) distrustAgentLocked() {
	if ch.agent != agentAbsent {
		ch.agent = agentDistrusted
	}
}

// exec runs a call by one msb exec: `AGENT builtin NAME ARGS...` when the
// call names a builtin and the sandbox may have the agent, else its
// script. A session that attached does not know: its first such call
// tries the agent, and runs the script when msb could not start it.
func (s *Session) exec(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	script := scriptArgv(cmd.Script, cmd.Args)
	if cmd.Builtin == "" {
		s.served.exec("", false)
		return s.execArgv(ctx, script, opts)
	}
	builtin := append([]string{agentGuestPath, "builtin", cmd.Builtin}, cmd.Args...)
	switch p := s.presence(); p {
	case agentPresent:
		s.served.exec(cmd.Builtin, false)
		return s.execArgv(ctx, builtin, opts)
	case agentAbsent, agentDistrusted:
		s.served.exec("", p == agentDistrusted)
		return s.execArgv(ctx, script, opts)
	}
	var stdin []byte
	if opts.Stdin != nil {
		b, err := io.ReadAll(io.LimitReader(opts.Stdin, maxRetryStdin+1))
		if err != nil {
			return nil, err
		}
		if len(b) > maxRetryStdin {
			opts.Stdin = io.MultiReader(bytes.NewReader(b), opts.Stdin)
			s.served.exec("", true)
			return s.execArgv(ctx, script, opts)
		}
		stdin, opts.Stdin = b, bytes.NewReader(b)
	}
	res, err := s.execArgv(ctx, builtin, opts)
	if !agentMissing(err) {
		s.served.exec(cmd.Builtin, false)
		if err == nil {
			s.learnPresence(agentPresent)
		}
		return res, err
	}
	s.logger.Debug("no guest agent in the sandbox; calls run their scripts", "sandbox", s.names.Sandbox)
	s.learnPresence(agentAbsent)
	if stdin != nil {
		opts.Stdin = bytes.NewReader(stdin)
	}
	s.served.exec("", true)
	return s.execArgv(ctx, script, opts)
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
