package microvm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// helloTimeout bounds the wait for the agent's first line: a sandbox
// without the agent answers at once (msb exec exits 127), one whose file
// at agentGuestPath is something else may stay silent. Tests shorten it.
var helloTimeout = 5 * time.Second

// channelStopGrace is how long a closed channel's msb exec gets to exit
// after its stdin ended before its process group is killed.
const channelStopGrace = 2 * time.Second

// channelMode is what the next call does about the channel.
type channelMode int

const (
	channelClosed channelMode = iota // open it on the next call
	channelOpen
	channelOff // one msb exec per call from now on
)

// channel is a session's guest-agent channel: one `msb exec --stream
// --user 0 NAME -- AGENT serve` whose stdin and stdout carry every call
// (package agentchan). It is opened by the first call and whenever a
// call finds it closed; it dies on its own when the agent, its msb exec
// or the sandbox ends, and then is reopened once before the session falls
// back to one msb exec per call for good.
type channel struct {
	mu       sync.Mutex
	mode     channelMode
	conn     *agentchan.Conn
	proc     *msb.Process
	deaths   int           // channels that died under this session
	inFlight int           // calls running on a channel of this session
	quietFor time.Duration // close after this long without calls; 0: never
	quiet    *time.Timer
	// known holds what an msb inspect of this session said about the
	// sandbox that a stop and a start leave as they were (nil: no inspect
	// yet); started says this session has just started the sandbox again
	// (a resume), so it runs. Together they spare the reopen after a
	// resume its inspect.
	known   *sandboxFacts
	started bool
	// gone answers, once per dead channel, whether it died with its
	// sandbox (see sandboxGone); deadConn is the channel it is for.
	deadConn *agentchan.Conn
	gone     func() bool
}

// sandboxFacts is what opening a channel needs from msb inspect, besides
// the status: the image's user (config.runtime.user, which msb modify
// cannot change) and whether the sandbox has the agent (a create-time
// patch, or the label a fork's create wrote). msb records both on the
// host; the guest cannot change them.
type sandboxFacts struct {
	user  string
	agent bool
}

func factsOf(info *msb.SandboxInfo) *sandboxFacts {
	return &sandboxFacts{user: info.User, agent: hasAgent(info)}
}

// hasAgent says the sandbox's root disk holds the guest agent: its create
// placed it, or the disk a fork's create copied had it.
func hasAgent(info *msb.SandboxInfo) bool {
	return slices.Contains(info.CopyFiles, agentGuestPath) || info.Labels[session.LabelAgent] == session.AgentInherited
}

// channelConn returns the open channel, opening it when it is closed (a
// dead one is reaped first, counting as a death), and counts the call in
// flight until callDone; nil means the call goes through its own msb exec.
// s.life.mu must be held shared, so the sandbox is not paused under the
// open.
func (s *Session) channelConn(ctx context.Context) *agentchan.Conn {
	ch := &s.ch
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for ch.conn != nil {
		select {
		case <-ch.conn.Done():
			conn, proc := s.diedLocked()
			ch.mu.Unlock()
			s.logger.Debug("guest agent channel died", "sandbox", s.names.Sandbox, "err", conn.Err())
			s.shutdown(conn, proc)
			ch.mu.Lock()
		default:
			ch.inFlight++
			ch.stopQuietLocked()
			return ch.conn
		}
	}
	if ch.mode != channelClosed {
		return nil
	}
	conn, proc, err := s.openChannel(ctx)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, errInspect) {
			ch.mode = channelOff
			s.event(agentchan.OpenFailed)
			s.event(agentchan.FellBack)
		}
		s.logger.Debug("guest agent channel not opened; one msb exec per call", "sandbox", s.names.Sandbox, "err", err)
		return nil
	}
	ch.conn, ch.proc, ch.mode = conn, proc, channelOpen
	ch.inFlight++
	s.event(agentchan.Opened)
	go s.watchChannel(conn)
	s.logger.Debug("guest agent channel open", "sandbox", s.names.Sandbox, "agent_pid", conn.AgentPID())
	return conn
}

// errInspect marks an open that failed because msb could not say what
// the sandbox is; the next call tries again.
var errInspect = errors.New("inspect")

// openChannel learns the image's user (see runningFacts), then starts
// the agent as root (its calls switch to their own users) with that user
// as its default, and waits for its hello. s.ch.mu must be held.
func (s *Session) openChannel(ctx context.Context) (*agentchan.Conn, *msb.Process, error) {
	facts, err := s.runningFacts(ctx)
	switch {
	case err != nil:
		return nil, nil, err
	case !facts.agent:
		return nil, nil, fmt.Errorf("sandbox was created without the guest agent")
	}
	argv := []string{agentGuestPath, "serve"}
	if facts.user != "" {
		argv = append(argv, "--default-user", facts.user)
	}
	conn, proc, err := s.startAgent(ctx, argv)
	if err != nil {
		return nil, nil, err
	}
	if older := conn.Older(); older != "" {
		if now, _ := s.replaceAgent(ctx, older); now {
			// No call has this channel yet: end it, and serve from the new agent.
			s.shutdown(conn, proc)
			return s.startAgent(ctx, argv)
		}
	}
	return conn, proc, nil
}

// startAgent starts the agent by argv on a channel and waits for its hello.
func (s *Session) startAgent(ctx context.Context, argv []string) (*agentchan.Conn, *msb.Process, error) {
	proc, err := s.client.ExecStream(ctx, msb.ExecOptions{Name: s.names.Sandbox, User: "0", Argv: argv})
	if err != nil {
		return nil, nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, helloTimeout)
	conn, err := agentchan.Open(hctx, proc.Stdout, proc.Stdin)
	cancel()
	if err != nil {
		stopErr := proc.Stop(channelStopGrace)
		return nil, nil, fmt.Errorf("%w (msb: %v)", err, stopErr)
	}
	return conn, proc, nil
}

// runningFacts makes sure the sandbox runs (a long-lived exec would keep
// a stopped one running) and returns its facts: from one msb inspect,
// except right after this session started the sandbox again when an
// inspect of this session already gave them. Any other reopen (after a
// death, or a quiet period during which msb may have stopped the
// sandbox) asks msb. s.ch.mu must be held.
func (s *Session) runningFacts(ctx context.Context) (*sandboxFacts, error) {
	started := s.ch.started
	s.ch.started = false
	if started && s.ch.known != nil {
		return s.ch.known, nil
	}
	ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
	info, err := s.client.Inspect(ictx, s.names.Sandbox)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errInspect, err)
	}
	s.ch.learnLocked(info)
	if info.Status != "Running" {
		return nil, fmt.Errorf("sandbox is %s", info.Status)
	}
	return s.ch.known, nil
}

// learned keeps the facts of an inspect made for another reason (the
// lifecycle's), for the next open after a start.
func (s *Session) learned(info *msb.SandboxInfo) {
	s.ch.mu.Lock()
	s.ch.learnLocked(info)
	s.ch.mu.Unlock()
}

// learnLocked keeps what info says that a stop and a start do not change.
// ch.mu must be held.
func (ch *channel) learnLocked(info *msb.SandboxInfo) {
	ch.known = factsOf(info)
	if ch.quietFor == 0 && info.IdleTimeout > 0 {
		// msb counts an open exec as activity: an idle timeout would never
		// fire while the channel is open.
		ch.quietFor = info.IdleTimeout / 2
	}
}

// resumed says this session has just started the sandbox: it runs.
func (s *Session) resumed() {
	s.ch.mu.Lock()
	s.ch.started = true
	s.ch.mu.Unlock()
}

// watchChannel reaps a channel that dies on its own (the agent or its msb
// exec ended, the sandbox stopped), so no msb process waits for the next
// call to be noticed.
func (s *Session) watchChannel(conn *agentchan.Conn) {
	<-conn.Done()
	s.ch.mu.Lock()
	if s.ch.conn != conn {
		s.ch.mu.Unlock() // closed on purpose, or already reaped
		return
	}
	c, proc := s.diedLocked()
	s.ch.mu.Unlock()
	s.logger.Debug("guest agent channel died", "sandbox", s.names.Sandbox, "err", conn.Err())
	s.shutdown(c, proc)
}

// detachLocked takes the channel out of the session; died counts it as a
// death (the second one turns the channel off). ch.mu must be held.
func (ch *channel) detachLocked(died bool) (*agentchan.Conn, *msb.Process) {
	conn, proc := ch.conn, ch.proc
	ch.conn, ch.proc = nil, nil
	ch.stopQuietLocked()
	if ch.mode == channelOpen {
		ch.mode = channelClosed
	}
	if died {
		ch.deaths++
		if ch.deaths >= 2 {
			ch.mode = channelOff
		}
	}
	return conn, proc
}

// diedLocked takes a channel that died out of the session and counts
// the death (and the fallback, when it was the last one allowed).
// s.ch.mu must be held.
func (s *Session) diedLocked() (*agentchan.Conn, *msb.Process) {
	conn, proc := s.ch.detachLocked(true)
	s.event(agentchan.Died)
	if s.ch.mode == channelOff {
		s.event(agentchan.FellBack)
	}
	return conn, proc
}

// shutdown closes a detached channel: the agent's stdin ends (it kills
// its calls and exits), msb exec gets channelStopGrace to exit, then its
// process group is killed. Nothing of it runs once shutdown returns.
func (s *Session) shutdown(conn *agentchan.Conn, proc *msb.Process) {
	if conn == nil {
		return
	}
	_ = conn.Close()
	if err := proc.Stop(channelStopGrace); err != nil {
		s.logger.Debug("guest agent channel's msb exec", "sandbox", s.names.Sandbox, "err", err)
	}
}

// closeChannel closes the channel, if open, and leaves it closed (the
// next call reopens it) or, with off, off for good.
func (s *Session) closeChannel(off bool) {
	s.ch.mu.Lock()
	conn, proc := s.ch.detachLocked(false)
	if off {
		s.ch.mode = channelOff
	}
	s.ch.mu.Unlock()
	s.shutdown(conn, proc)
}

// callDone ends a call on conn; the last call of a quiet period arms the
// timer that closes the channel (see Options.IdleTimeout).
func (s *Session) callDone(conn *agentchan.Conn) {
	ch := &s.ch
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.inFlight--
	if ch.conn != conn || ch.inFlight > 0 || ch.quietFor <= 0 {
		return
	}
	ch.quiet = time.AfterFunc(ch.quietFor, func() {
		ch.mu.Lock()
		if ch.conn != conn || ch.inFlight > 0 {
			ch.mu.Unlock()
			return
		}
		c, proc := ch.detachLocked(false)
		ch.mu.Unlock()
		s.logger.Debug("guest agent channel closed after a quiet period, so msb's idle timeout can stop the sandbox", "sandbox", s.names.Sandbox)
		s.shutdown(c, proc)
	})
}

func (ch *channel) stopQuietLocked() {
	if ch.quiet != nil {
		ch.quiet.Stop()
		ch.quiet = nil
	}
}

// runChannel runs one call on the channel, with the exec path's host
// deadline and its errors.
func (s *Session) runChannel(ctx context.Context, conn *agentchan.Conn, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	defer s.callDone(conn)
	hostTimeout := s.opTimeout + session.HostGrace
	if opts.GuestTimeout > 0 {
		hostTimeout = opts.GuestTimeout + session.HostGrace
	}
	ctx, cancel := context.WithTimeout(ctx, hostTimeout)
	defer cancel()
	workdir := opts.Workdir
	if workdir == "" {
		workdir = msbPaths.Workspace
	}
	req := agentchan.Request{
		Script: cmd.Script, Args: cmd.Args, Stdin: opts.Stdin,
		User: opts.User, Workdir: workdir,
		Timeout: opts.GuestTimeout, MaxOutput: opts.MaxOutput,
	}
	if cmd.Builtin != "" {
		if !conn.Offers(cmd.Builtin) {
			err := fmt.Errorf("%w: the agent in sandbox %s does not offer %q: it is older than this program (placed by an older one, or a fork of an older session's disk)",
				session.ErrNoAgent, s.names.Sandbox, cmd.Builtin)
			if _, rerr := s.replacementState(); rerr != nil {
				err = fmt.Errorf("%w, and was not replaced: %w", err, rerr)
			}
			return nil, err
		}
		req.Script, req.Builtin = "", cmd.Builtin
	}
	s.served.channel(req.Builtin)
	res, err := conn.Run(ctx, req, agentchan.Output{Stdout: opts.Stdout, Stderr: opts.Stderr})
	var out *session.Result
	if res != nil {
		out = &session.Result{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}
	}
	if err == nil {
		return out, nil
	}
	if errors.Is(err, agentchan.ErrBroken) && s.sandboxGone(ctx, conn) {
		// As the exec path reports it: removed outside this process.
		return out, fmt.Errorf("%w: guest agent: %w", session.ErrGone, err)
	}
	return out, agentchan.SessionError(err)
}

// sandboxGone tells whether the dead channel conn died with its sandbox,
// removed outside this process (session rm, the reaper): one msb inspect
// per dead channel, whatever number of calls it failed.
func (s *Session) sandboxGone(ctx context.Context, conn *agentchan.Conn) bool {
	ch := &s.ch
	ch.mu.Lock()
	if ch.deadConn != conn {
		ch.deadConn = conn
		ch.gone = sync.OnceValue(func() bool {
			ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inspectTimeout)
			defer cancel()
			_, err := s.client.Inspect(ictx, s.names.Sandbox)
			return errors.Is(err, msb.ErrSandboxNotFound)
		})
	}
	gone := ch.gone
	ch.mu.Unlock()
	return gone()
}
