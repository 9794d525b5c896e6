package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// A session's resident sandbox is one sandbox that lives from the
// session's first call to its Close, Pause or Poison and runs the guest
// agent, which runs every call it is given as frames on its stdin and
// stdout (package agentchan), as on msb: a call costs a frame, not a
// sandbox, and a command's background processes outlive its call.
//
// Calls a resident sandbox cannot run as a sandbox of their own would
// still run one each: root's (uploads and skills), those of a session
// whose policy it does not cover (danger-full-access, an egress
// allowlist, cgroup limits), those of an attached session, and every call
// on a host where it cannot start.

const (
	// residentHelloTimeout bounds the wait for the agent's first frame.
	residentHelloTimeout = 5 * time.Second
	// residentMaxDeaths is how many resident sandboxes may die on their own
	// before the session runs a sandbox per call for good.
	residentMaxDeaths = 3
)

// residentStarter is a platform that can start a resident sandbox.
type residentStarter interface {
	// residentPossible tells whether this host can start one.
	residentPossible() bool
	// startResident starts the sandbox; end kills it and waits until
	// nothing of it runs.
	startResident(c call, stdin, stdout, stderr *os.File) (cmd *exec.Cmd, end func(), err error)
}

// resident is one running resident sandbox.
type resident struct {
	conn   *agentchan.Conn
	stderr *tailBuffer
	stop   func() // ends the sandbox and all in it; waits; idempotent
}

// residency is a session's resident sandbox, started by the first call
// that can use one.
type residency struct {
	mu     sync.Mutex
	off    bool // calls run in sandboxes of their own
	cur    *resident
	deaths int
	// starting is closed when the start under way ends; nil when none
	// is. The start runs without mu, so a call that waits for it can
	// give up when its own context ends.
	starting chan struct{}
}

// residentFor reports whether call c can run in the resident sandbox.
func (s *Session) residentFor(c call) bool {
	rs, ok := s.plat.(residentStarter)
	return ok && rs.residentPossible() && c.agent != "" && !c.root &&
		c.policy.Mode != ModeDangerFullAccess && c.policy.Network != NetworkAllowlist && !c.limits.cgroupNeeded()
}

// mayBeResident reports whether calls of this session may run in a
// resident sandbox, where their processes outlive them.
func (s *Session) mayBeResident() bool {
	s.res.mu.Lock()
	off := s.res.off
	s.res.mu.Unlock()
	if off {
		return false
	}
	agent, _ := s.agent.hostPath()
	return s.residentFor(call{agent: agent, policy: s.rec.Policy, limits: s.limits()})
}

// residentConn returns the running resident sandbox's channel, starting
// the sandbox when none runs; nil means the call runs a sandbox of its
// own (the session's resident sandbox is off, or could not start). It
// fails only when ctx ends while another call starts the sandbox.
func (s *Session) residentConn(ctx context.Context, c call) (*agentchan.Conn, error) {
	if !s.residentFor(c) {
		return nil, nil
	}
	r := &s.res
	r.mu.Lock()
	for {
		if r.off {
			r.mu.Unlock()
			return nil, nil
		}
		if cur := r.cur; cur != nil {
			select {
			case <-cur.conn.Done():
				r.cur = nil
				r.deaths++
				s.event(agentchan.Died)
				s.log.Warn("local sandbox: resident sandbox died", "err", cur.conn.Err(), "agent_stderr", cur.stderr.String())
				go cur.stop()
				if r.deaths >= residentMaxDeaths {
					r.off = true
					s.event(agentchan.FellBack)
				}
				continue
			default:
				r.mu.Unlock()
				return cur.conn, nil
			}
		}
		if r.starting == nil {
			break
		}
		starting := r.starting
		r.mu.Unlock()
		select {
		case <-starting:
		case <-ctx.Done():
			return nil, ctxError(ctx)
		}
		r.mu.Lock()
	}
	starting := make(chan struct{})
	r.starting = starting
	r.mu.Unlock()

	cur, err := s.startResident(ctx, c)

	r.mu.Lock()
	defer r.mu.Unlock()
	r.starting = nil
	close(starting)
	if err != nil {
		// Only a cancelled call tries again on the next one.
		if ctx.Err() == nil {
			r.off = true
			s.event(agentchan.OpenFailed)
			s.event(agentchan.FellBack)
		}
		s.log.Warn("local sandbox: no resident sandbox; one sandbox per call", "err", err)
		return nil, nil
	}
	s.event(agentchan.Opened)
	r.cur = cur
	return cur.conn, nil
}

// startResident starts the sandbox and waits for its agent's hello.
func (s *Session) startResident(ctx context.Context, c call) (*resident, error) {
	starter := s.plat.(residentStarter)
	// The agent's stdin, stdout and stderr.
	p, err := pipes(3)
	if err != nil {
		return nil, err
	}
	inR, inW, outR, outW, errR, errW := p[0], p[1], p[2], p[3], p[4], p[5]
	stderr := &tailBuffer{max: stderrTail}
	cmd, end, err := starter.startResident(c, inR, outW, errW)
	closeFiles(inR, outW, errW)
	if err != nil {
		closeFiles(inW, outR, errR)
		return nil, err
	}
	res := &resident{stderr: stderr}
	exited := make(chan struct{}) // the sandbox's first process was waited for
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		stderr.drain(errR)
		errR.Close()
	}()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	var conn *agentchan.Conn
	res.stop = sync.OnceFunc(func() {
		if conn != nil {
			_ = conn.Close()
		} else {
			closeFiles(inW, outR)
		}
		// Nothing in the sandbox needs an orderly end: the workspace is on
		// the host, and the agent's writes are atomic.
		end()
		<-exited
		// Every process of the sandbox is gone with its pid namespace, so
		// nothing else holds the stderr pipe.
		<-copied
	})
	hctx, cancel := context.WithTimeout(ctx, residentHelloTimeout)
	conn, err = agentchan.Open(hctx, outR, inW)
	cancel()
	if err != nil {
		res.stop()
		return nil, fmt.Errorf("guest agent: %w (stderr: %s)", err, trimMsg(stderr.String()))
	}
	res.conn = conn
	return res, nil
}

// stopResident ends the resident sandbox, if one runs, and everything in
// it; the next call that can use one starts another.
func (s *Session) stopResident() {
	r := &s.res
	r.mu.Lock()
	// A start under way ends first (within residentHelloTimeout), so the
	// sandbox it starts is the one stopped here.
	for r.starting != nil {
		starting := r.starting
		r.mu.Unlock()
		<-starting
		r.mu.Lock()
	}
	cur := r.cur
	r.cur = nil
	r.mu.Unlock()
	if cur != nil {
		cur.stop()
	}
}

// runResident runs one call on the resident sandbox's channel.
func (s *Session) runResident(ctx context.Context, conn *agentchan.Conn, c call, cmd session.Command, opts session.ShellOptions, guestTimeout time.Duration, maxOutput int64) (*session.Result, error) {
	if guestTimeout > 0 {
		// A backstop for the agent's own timer.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, guestTimeout+session.HostGrace)
		defer cancel()
	}
	req := agentchan.Request{
		Script: cmd.Script, Args: cmd.Args, Stdin: opts.Stdin, Workdir: c.workdir,
		Timeout: guestTimeout, MaxOutput: maxOutput,
	}
	if cmd.Builtin != "" && conn.Offers(cmd.Builtin) {
		req.Script, req.Builtin = "", cmd.Builtin
	}
	s.served.count(req.Builtin, cmd.Builtin != "" && req.Builtin == "", true)
	res, err := conn.Run(ctx, req, agentchan.Output{Stdout: opts.Stdout, Stderr: opts.Stderr})
	if err == nil {
		return &session.Result{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, nil
	}
	if ctx.Err() != nil {
		// A call ended by the host (its deadline, Close, Poison) says so,
		// even when the channel went down with it.
		err = ctxError(ctx)
	} else {
		err = agentchan.SessionError(err)
	}
	if res == nil {
		return nil, err
	}
	// A killed call's status, as in a sandbox of one call.
	return &session.Result{ExitCode: agentchan.KilledExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, err
}

// pipes opens n pipes: their read ends at even indexes, write ends at
// odd ones; none on error.
func pipes(n int) ([]*os.File, error) {
	var p []*os.File
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			closeFiles(p...)
			return nil, err
		}
		p = append(p, r, w)
	}
	return p, nil
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

// drain keeps what r gives until it ends.
func (t *tailBuffer) drain(r *os.File) {
	buf := make([]byte, 4096)
	for {
		k, err := r.Read(buf)
		_, _ = t.Write(buf[:k])
		if err != nil {
			return
		}
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
