package microvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent/selfagent"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// maxReplayedStdin bounds the stdin an exec-path call keeps to send again
// after it met an older agent (the uploads' tmpfs is 64M).
const maxReplayedStdin = 64 << 20

// replaceBudget bounds a replacement: the copy of the agent (megabytes)
// into the sandbox and its install. That is setup of the session, like a
// create, not a guest command, so the operation timeout does not bound it:
// an emulated VM took over 10 s to take the copy.
const replaceBudget = 2 * time.Minute

// agentReplacement is a session's one attempt to replace an older guest
// agent (a sandbox made, or a disk forked, by an older oma-sandbox) with
// this program's: a sandbox lives across upgrades of the program that
// drives it, and its agent must offer every builtin this program's tools
// ask for, with the fixes of this program's revision. A session whose
// Create placed the agent makes no attempt: that agent is this program's
// own (a fork's create places none).
type agentReplacement struct {
	turnOnce sync.Once
	turn     chan struct{} // held by the call making the attempt

	mu      sync.Mutex
	tried   bool  // or Create placed the agent
	err     error // why the attempt failed
	current bool  // an agent answered a call as one of this revision or later
}

// take waits for the turn to attempt, as long as ctx lets it: one call
// makes the attempt, and the calls that meet the older agent meanwhile
// wait for its outcome.
func (r *agentReplacement) take(ctx context.Context) error {
	r.turnOnce.Do(func() { r.turn = make(chan struct{}, 1) })
	select {
	case r.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *agentReplacement) give() { <-r.turn }

// replaceAgent copies this program's agent into the running sandbox beside
// the agent's path and has it install itself there (a rename; an agent
// still running keeps its file), once per session: now says this call did,
// and the next channel or exec runs the new agent. A later call gets the
// attempt's error again (nil when it succeeded, or when Create placed the
// agent). An attempt the caller's cancel cut short does not count. older
// says how the agent is older, for the log.
func (s *Session) replaceAgent(ctx context.Context, older string) (now bool, err error) {
	r := &s.replacement
	if err := r.take(ctx); err != nil {
		return false, err
	}
	defer r.give()
	if tried, err := s.replacementState(); tried {
		return false, err
	}
	err = s.installAgent(ctx)
	if err != nil && ctx.Err() != nil {
		return false, err
	}
	r.mu.Lock()
	r.tried, r.err = true, err
	r.mu.Unlock()
	if err != nil {
		s.event(agentchan.ReplaceFailed)
		s.logger.Warn("guest agent older than this program not replaced", "sandbox", s.names.Sandbox, "older", older, "err", err)
		return false, err
	}
	s.event(agentchan.Replaced)
	s.logger.Info("guest agent older than this program replaced", "sandbox", s.names.Sandbox, "older", older)
	return true, nil
}

// asksRevision says whether an exec-path call asks the agent for this
// program's revision: until the session has made its attempt, or an agent
// has answered as one of this revision or later. Only an agent at least as
// recent replaces it, so the answer holds for the session's life.
func (s *Session) asksRevision() bool {
	r := &s.replacement
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.tried && !r.current
}

// agentIsCurrent records that the agent ran a call that asked for this
// program's revision.
func (s *Session) agentIsCurrent() {
	r := &s.replacement
	r.mu.Lock()
	r.current = true
	r.mu.Unlock()
}

// replacementState says whether the session has made its attempt (or placed
// the agent itself), and why the attempt failed.
func (s *Session) replacementState() (tried bool, err error) {
	r := &s.replacement
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tried, r.err
}

func (s *Session) installAgent(ctx context.Context) error {
	host, err := agentPath(Options{AgentFile: s.agentFile})
	if err != nil {
		return err
	}
	staged := fmt.Sprintf("%s%016x", selfagent.StagedPrefix, randomUint64())
	ref, err := msb.PathRef(s.names.Sandbox, staged)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, replaceBudget)
	defer cancel()
	if err := s.client.Copy(ctx, host, ref); err != nil {
		return fmt.Errorf("copy the agent to %s: %w", staged, err)
	}
	// The budget's deadline, which ctx carries, bounds the install too.
	res, err := s.execArgv(ctx, []string{staged, "install", staged, agentGuestPath},
		session.ShellOptions{User: "0", GuestTimeout: replaceBudget})
	if err != nil {
		return fmt.Errorf("install the agent: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("install the agent: exit %d: %s", res.ExitCode, tail(res.Stderr))
	}
	return nil
}

// olderAnswer tells an older agent's answer to an exec of builtin name
// from the builtin's own outcome, and says how the agent is older: lacking
// says it does not have the builtin (one of this program's); otherwise it
// refused the revision asked (asked set), or, older than revisions, took
// the option for a builtin it does not have. A guest can forge any of
// these: that costs one replacement attempt.
func olderAnswer(res *session.Result, name string, asked bool) (older string, lacking bool) {
	if res == nil || res.ExitCode != 2 {
		return "", false
	}
	switch string(res.Stderr) {
	case unknownBuiltin(name):
		if agentwire.IsBuiltin(name) {
			return "it lacks " + name, true
		}
	case unknownBuiltin(agentwire.RevisionOption()):
		if asked {
			return "it has no revision", false
		}
	case agentwire.OlderThanRevision(agentwire.Revision):
		if asked {
			return "its revision is lower than this program's", false
		}
	}
	return "", false
}

// unknownBuiltin is an agent's answer to a builtin it does not have.
func unknownBuiltin(name string) string {
	return `oma-guest-agent: unknown builtin "` + name + `"` + "\n"
}

// replayable keeps what is read through it, up to maxReplayedStdin, so an
// exec-path call can be sent again.
type replayable struct {
	r    io.Reader
	kept bytes.Buffer
	over bool
}

func (p *replayable) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if !p.over {
		if p.kept.Len()+n > maxReplayedStdin {
			p.over, p.kept = true, bytes.Buffer{}
		} else {
			p.kept.Write(b[:n])
		}
	}
	return n, err
}

// again is the stdin to send again, or an error when it was too large to keep.
func (p *replayable) again() (io.Reader, error) {
	if p.over {
		return nil, errors.New("its stdin was too large to send again")
	}
	// Whatever msb left unread is still to come.
	return io.MultiReader(bytes.NewReader(p.kept.Bytes()), p.r), nil
}
