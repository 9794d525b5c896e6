package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// A session's resident sandbox is one sandbox that lives from the
// session's first call to its Close, Poison or resize (Pause freezes it,
// and ends it only where it cannot be frozen) and runs the guest
// agent, which runs every call it is given as frames on a connection to
// its socket (package agentchan), as on msb: a call costs a frame, not a
// sandbox, and a command's background processes outlive its call. Like a
// VM, it is the session's, not the process's that started it: any process
// of the session's owner (another CLI call, Attach in a second program)
// connects to the same sandbox, and it runs on after its starter exits
// until Close, Poison, a resize or the reaper ends it, from any process.
//
// A session's memory and CPU limits bound its resident sandbox as a
// VM's bound the VM: everything in it together, the agent included; its
// process limit binds every process its calls start, together, but not
// the agent (see callGroups.commands).
//
// Calls a resident sandbox cannot run as a sandbox of their own would
// still run one each: root's (uploads and skills), those of a session
// made to (SandboxPerCall), and every call on a host where it cannot
// start. How the agent keeps out of its commands' reach depends on who
// runs oma-sandbox (startResident): as root, it is another host uid; as
// any other user, it is outside their pid namespace.

const (
	// residentHelloTimeout bounds the wait for the agent's first frame.
	residentHelloTimeout = 5 * time.Second
	// residentMaxDeaths is how many resident sandboxes may die on their own
	// before the session runs a sandbox per call for good.
	residentMaxDeaths = 3
	// residentDyingTimeout bounds the wait for a sandbox whose agent
	// refused a channel to end.
	residentDyingTimeout = time.Second
	// olderRecheck is how often, at most, a process whose calls run on an
	// older agent (its sandbox was busy when connected) asks whether the
	// sandbox has become idle, so that it can be replaced.
	olderRecheck = time.Second
	// olderLockWait bounds that question's wait for the resident lock.
	olderLockWait = 50 * time.Millisecond
	// standbyEndTimeout bounds the agent's ending of its standbys before
	// the sandbox is judged idle.
	standbyEndTimeout = time.Second
)

// residentStarter is a platform that can start a resident sandbox.
type residentStarter interface {
	// startResident starts the sandbox, its agent serving each connection
	// ln accepts, its stderr to stderr, under the session's memory and
	// CPU limits; the sandbox outlives this process and ends by the procs
	// returned.
	startResident(c call, ln, stderr *os.File) (residentProcs, error)
}

// residentProcs are the processes whose end ends a resident sandbox, as
// the session's directory records them for every process.
type residentProcs struct {
	Init  proc `json:"init"`  // the sandbox's pid 1
	Bwrap proc `json:"bwrap"` // its parent
	// Cgroup names the sandbox's groups under the session's, when its
	// limits need them; they go with it.
	Cgroup string `json:"cgroup,omitempty"`
	// Proxy is its egress proxy under an allowlist, which ends with it.
	Proxy proc `json:"proxy,omitzero"`
}

// proc names a process across processes: its pid and its start time, in
// clock ticks since boot, which a recycled pid does not share.
type proc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// resident is this process's channel to the session's resident sandbox.
type resident struct {
	conn  *agentchan.Conn
	procs residentProcs // the sandbox connected to
	stop  func()        // ends the sandbox and all in it; waits; idempotent
	// watch begins watching for a call: the function it returns reports,
	// as notes, the limits that fired and the destinations the proxy
	// refused since.
	watch func() func() []string
	// recheck is when an older agent's sandbox may next be asked whether
	// it is idle (olderRecheck).
	recheck time.Time
}

// residency is a session's resident sandbox, started by the first call
// that can use one.
type residency struct {
	mu     sync.Mutex
	off    bool // calls run in sandboxes of their own
	cur    *resident
	deaths int
	// calls counts this process's calls on a resident sandbox not yet
	// ended (see leave).
	calls int
	// starting is closed when the start under way ends; nil when none
	// is. The start runs without mu, so a call that waits for it can
	// give up when its own context ends.
	starting chan struct{}
}

// residentFor reports whether call c can run in the resident sandbox.
func (s *Session) residentFor(c call) bool {
	_, ok := s.plat.(residentStarter)
	return ok && !c.root
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
	return s.residentFor(call{policy: s.rec.Policy, limits: s.limits()})
}

// residentSandbox returns the running resident sandbox, starting it when
// none runs; nil means the call runs a sandbox of its own (the session's
// resident sandbox is off, or could not start); the caller leaves
// (s.res.leave) a sandbox returned once its call has ended. It fails only
// when ctx ends while another call starts the sandbox.
func (s *Session) residentSandbox(ctx context.Context, c call) (*resident, error) {
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
				// A sandbox another process ended on purpose (Pause, Close,
				// Poison) is no longer the one recorded; one that died on its
				// own still is.
				died := readResident(s.dirs.Root) == cur.procs
				if died {
					r.deaths++
					s.event(agentchan.Died)
					s.log.Warn("local sandbox: resident sandbox died", "err", cur.conn.Err(), "agent_stderr", logTail(s.dirs.Root))
				}
				// What is left of it ends before another starts; calls
				// meanwhile wait as for a start.
				stopping := make(chan struct{})
				r.starting = stopping
				r.mu.Unlock()
				cur.stop()
				r.mu.Lock()
				r.starting = nil
				close(stopping)
				if died && r.deaths >= residentMaxDeaths {
					r.off = true
					s.event(agentchan.FellBack)
				}
				continue
			default:
			}
			if cur.conn.Older() == "" || r.calls > 0 || time.Now().Before(cur.recheck) {
				r.calls++
				r.mu.Unlock()
				return cur, nil
			}
			// No call of this process runs on the older agent: if no
			// other process's does and nothing runs in the sandbox, it
			// is replaced. Calls meanwhile wait as for a start.
			cur.recheck = time.Now().Add(olderRecheck)
			r.cur = nil
			checking := make(chan struct{})
			r.starting = checking
			r.mu.Unlock()
			ended := s.endIfIdle(ctx, cur)
			r.mu.Lock()
			r.starting = nil
			close(checking)
			if !ended {
				r.cur = cur
			}
			continue
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
	if errors.Is(err, session.ErrGone) || errors.Is(err, session.ErrPaused) {
		// The session is being removed, or was paused as the call started:
		// nothing is started, and the next call may use a resident sandbox.
		return nil, err
	}
	if err != nil {
		// Only a cancelled call, or one that found the sandbox frozen,
		// tries again on the next one.
		if ctx.Err() == nil && !errors.Is(err, errResidentFrozen) {
			r.off = true
			s.event(agentchan.OpenFailed)
			s.event(agentchan.FellBack)
		}
		s.log.Warn("local sandbox: no resident sandbox; one sandbox per call", "err", err)
		return nil, nil
	}
	s.event(agentchan.Opened)
	cur.recheck = time.Now().Add(olderRecheck)
	r.cur = cur
	r.calls++
	return cur, nil
}

// errResidentFrozen is a resident sandbox whose agent did not answer
// because its groups are frozen: it is not broken, and serves once thawed.
var errResidentFrozen = errors.New("the resident sandbox is frozen")

// leave ends a call that residentSandbox gave a resident sandbox.
func (r *residency) leave() {
	r.mu.Lock()
	r.calls--
	r.mu.Unlock()
}

// stopResident ends the session's resident sandbox, whichever process
// started it, and everything in it; the next call that can use one starts
// another. why, when given, says what ended it to the calls of any process
// that were running in it (markEnded).
func (s *Session) stopResident(why string) {
	if why != "" {
		markEnded(s.dirs.Root, readResident(s.dirs.Root).Init, why)
	}
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
	s.endAnyResident()
}

// endedFile, in a session's state directory, says what the host last
// ended the session's resident sandbox for, and which sandbox that was
// (its init, as the resident's record names it).
const endedFile = "ended"

type endedMark struct {
	Init proc   `json:"init"`
	Why  string `json:"why"`
}

// markEnded records that the host ends the resident sandbox whose init is
// init, for why. Best effort: without it a call that was running there
// ends as a broken channel, saying nothing of why.
func markEnded(root string, init proc, why string) {
	if init.PID == 0 {
		return
	}
	if data, err := json.Marshal(endedMark{Init: init, Why: why}); err == nil {
		_ = os.WriteFile(filepath.Join(root, endedFile), data, 0o600)
	}
}

// endedFor is what the host ended the resident sandbox whose init is init
// for, or "" when it did not end that one.
func endedFor(root string, init proc) string {
	f, err := openOwned(filepath.Join(root, endedFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	var m endedMark
	if json.NewDecoder(io.LimitReader(f, 1024)).Decode(&m) != nil || m.Init != init {
		return ""
	}
	return m.Why
}

// runResident runs one call on the resident sandbox's channel.
func (s *Session) runResident(ctx context.Context, cur *resident, c call, cmd session.Command, opts session.ShellOptions, guestTimeout time.Duration, maxOutput int64) (*session.Result, error) {
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
	if cmd.Builtin != "" {
		req.Script, req.Builtin = "", cmd.Builtin
	}
	s.served.count(req.Builtin, true)
	fired := cur.watch()
	res, err := cur.conn.Run(ctx, req, agentchan.Output{Stdout: opts.Stdout, Stderr: opts.Stderr})
	if res != nil {
		// The limits and the proxy are the session's: a note says what
		// fired while the call ran, whichever of the session's calls it was.
		res.Stderr = addNotes(res.Stderr, opts, fired())
	}
	if err == nil {
		return &session.Result{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, nil
	}
	if ctx.Err() != nil {
		// A call ended by the host (its deadline, Close, Poison) says so,
		// even when the channel went down with it.
		err = ctxError(ctx)
	} else {
		err = agentchan.SessionError(err)
		if why := endedFor(s.dirs.Root, cur.procs.Init); why != "" && errors.Is(err, session.ErrChannelBroken) {
			err = fmt.Errorf("local sandbox %s: %s ended its sandbox under the call: %w", s.rec.Name, why, err)
		}
	}
	if res == nil {
		return nil, err
	}
	// A killed call's status, as in a sandbox of one call.
	return &session.Result{ExitCode: agentchan.KilledExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, err
}
