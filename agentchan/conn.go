// Package agentchan is the host's side of the guest agent's channel: it
// multiplexes calls over one oma-guest-agent's stdin and stdout (usually
// those of `msb exec --stream NAME -- AGENT serve`).
//
// The agent runs in the guest, so everything it writes is hostile: frames
// are parsed strictly (package agentwire), output is counted here whatever
// the agent claims, and any protocol violation kills the channel, failing
// every call in flight with an error wrapping ErrBroken.
package agentchan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// DefaultMaxOutput is the stdout+stderr cap of a Request that sets none.
const DefaultMaxOutput = 16 << 20

var (
	// ErrBroken means the channel died: calls in flight fail with an error
	// wrapping it, and so does every later Run.
	ErrBroken = errors.New("guest agent channel broken")
	// ErrTimedOut means the guest timer (Request.Timeout) fired and the
	// call's processes were killed.
	ErrTimedOut = errors.New("guest timeout")
	// ErrOutputOverflow means stdout+stderr passed Request.MaxOutput and
	// the call's processes were killed.
	ErrOutputOverflow = errors.New("output cap reached")
	// ErrCannotStart means the agent could not start the command (an
	// unknown user, for one).
	ErrCannotStart = errors.New("guest agent cannot start the command")
)

// Request is one call: `/bin/bash -c Script bash Args...` in the guest, or
// the agent's Builtin of that name with Args (see Conn.Offers).
type Request struct {
	Script string
	Args   []string
	// Builtin, when set, replaces Script.
	Builtin string
	// Stdin is streamed to the command; nil gives it an empty stdin.
	Stdin io.Reader
	// User is "" (the agent's default user), a name or uid, optionally
	// followed by ":group"; Workdir is "" (/workspace) or absolute.
	User, Workdir string
	// Timeout is the guest's timer; 0 means none.
	Timeout time.Duration
	// MaxOutput caps stdout+stderr; 0 means DefaultMaxOutput.
	MaxOutput int64
}

// Output receives a call's output as it comes, in the order the agent
// sent it, from Run's own goroutine; each chunk is the callee's to keep.
// A nil func keeps that stream in the Result instead.
type Output struct {
	Stdout, Stderr func([]byte)
}

// Result is a call's outcome. Stdout and Stderr hold the streams that had
// no Output func.
type Result struct {
	ExitCode       int
	Stdout, Stderr []byte
}

// Conn is one open channel. Its methods are safe for concurrent use.
type Conn struct {
	r     io.Reader
	w     io.WriteCloser
	hello agentwire.Hello

	dead   chan struct{}
	err    error // set before dead closes
	failed sync.Once
	wake   chan struct{} // the writer has lines to send

	mu        sync.Mutex
	lastID    uint64              // the last id given to a call
	sentID    uint64              // the last id whose run frame the pipe was offered
	calls     map[uint64]*call    // in flight; nil once dead
	abandoned map[uint64]struct{} // given up by the host, exit not yet seen
	queue     []outgoing          // frames for the writer
	queued    int                 // bytes queued and not yet written
	progress  chan struct{}       // closed, and replaced, on a write or an ack
}

// An agent that stops reading its stdin must not make the host hold more
// and more of it: run frames wait while more than maxQueued bytes wait for
// the writer, and stdin waits while more than agentwire.MaxStdinQueue do.
// Only kill and eof frames, one each per call, pass these bounds.
const maxQueued = agentwire.MaxHostLine

// outgoing is one encoded frame; a stdin frame names its call and its
// raw byte count, credited to the call once the writer hands it to the
// pipe, and a run frame its id, which the agent may answer only from then.
type outgoing struct {
	line  []byte
	stdin *call
	n     int64
	run   uint64
}

// Open starts serving the agent whose stdout is r and stdin is w, and
// waits for its hello as long as ctx allows. Close, or a failed Open,
// closes w, and r too when it is an io.Closer.
func Open(ctx context.Context, r io.Reader, w io.WriteCloser) (*Conn, error) {
	c := &Conn{
		r: r, w: w,
		dead:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		calls:     map[uint64]*call{},
		abandoned: map[uint64]struct{}{},
		progress:  make(chan struct{}),
	}
	hello := make(chan struct{})
	go c.read(hello)
	go c.write()
	select {
	case <-hello:
		if c.hello.Version != agentwire.Version {
			c.fail(fmt.Errorf("the agent speaks protocol version %d, not %d", c.hello.Version, agentwire.Version))
			return nil, c.err
		}
		return c, nil
	case <-c.dead:
		return nil, c.err
	case <-ctx.Done():
		c.fail(fmt.Errorf("waiting for the agent's hello: %w", context.Cause(ctx)))
		return nil, c.err
	}
}

// AgentPID is the agent's pid in the guest, as its hello said.
func (c *Conn) AgentPID() int { return c.hello.PID }

// Offers tells whether the agent's hello lists builtin name.
func (c *Conn) Offers(name string) bool { return slices.Contains(c.hello.Builtins, name) }

// Older says how the agent is older than this program, by its hello: it
// lacks builtins of this version, or announces a lower revision; "" when
// it is not.
func (c *Conn) Older() string {
	if lacking := agentwire.Lacking(c.hello.Builtins); len(lacking) > 0 {
		return "it lacks " + strings.Join(lacking, ", ")
	}
	if c.hello.Revision < agentwire.Revision {
		return fmt.Sprintf("its revision is %d, this program's %d", c.hello.Revision, agentwire.Revision)
	}
	return ""
}

// Close closes the channel; calls in flight fail with ErrBroken. It is
// idempotent and always returns nil.
func (c *Conn) Close() error {
	c.fail(errors.New("channel closed"))
	return nil
}

// Done is closed when the channel is dead: a read or write error, a
// protocol violation by the agent, or Close.
func (c *Conn) Done() <-chan struct{} { return c.dead }

// Err says why the channel died (wrapping ErrBroken), or nil while it
// lives.
func (c *Conn) Err() error {
	select {
	case <-c.dead:
		return c.err
	default:
		return nil
	}
}

// fail kills the channel for reason (the first reason wins): calls in
// flight fail, the writer stops, and the agent's pipes are closed, which
// makes the agent kill its calls and exit.
func (c *Conn) fail(reason error) {
	c.failed.Do(func() {
		c.err = fmt.Errorf("%w: %w", ErrBroken, reason)
		c.mu.Lock()
		c.calls = nil
		c.queue = nil
		close(c.dead)
		c.mu.Unlock()
		_ = c.w.Close()
		if rc, ok := c.r.(io.Closer); ok {
			_ = rc.Close()
		}
	})
}

// read dispatches the agent's frames until the stream ends or breaks the
// protocol; either kills the channel.
func (c *Conn) read(hello chan<- struct{}) {
	fr := agentwire.NewGuestReader(c.r)
	f, err := fr.Read()
	if err != nil {
		c.fail(readError(err))
		return
	}
	c.hello = *f.(*agentwire.Hello) // the reader returns a hello first or an error
	close(hello)
	for {
		f, err := fr.Read()
		if err != nil {
			c.fail(readError(err))
			return
		}
		if err := c.dispatch(f); err != nil {
			c.fail(err)
			return
		}
	}
}

func readError(err error) error {
	if errors.Is(err, io.EOF) {
		return errors.New("the agent's output ended")
	}
	return fmt.Errorf("reading from the agent: %w", err)
}

// write sends queued frames in order until the channel dies. A stdin
// frame's bytes become acknowledgeable, and a run frame's call
// answerable, only when its Write starts: an agent cannot ack or answer
// what the pipe has not been offered.
func (c *Conn) write() {
	for {
		select {
		case <-c.dead:
			return
		case <-c.wake:
		}
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
		c.mu.Unlock()
		for _, o := range batch {
			if o.stdin != nil || o.run != 0 {
				c.mu.Lock()
				if o.stdin != nil {
					o.stdin.queued -= o.n
					o.stdin.unacked += o.n
				} else {
					c.sentID = o.run // ids increase in queue order
				}
				c.mu.Unlock()
			}
			if _, err := c.w.Write(o.line); err != nil {
				c.fail(fmt.Errorf("writing to the agent: %w", err))
				return
			}
			c.mu.Lock()
			c.queued -= len(o.line)
			c.progressLocked()
			c.mu.Unlock()
		}
	}
}

// progressLocked wakes whoever waits for room in the queue or a window;
// c.mu is held.
func (c *Conn) progressLocked() {
	close(c.progress)
	c.progress = make(chan struct{})
}

// enqueueLocked queues one frame; c.mu is held.
func (c *Conn) enqueueLocked(o outgoing) {
	if c.calls == nil {
		return // dead
	}
	c.queue = append(c.queue, o)
	c.queued += len(o.line)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Conn) enqueueFrameLocked(f agentwire.Frame) {
	c.enqueueLocked(outgoing{line: encode(f)})
}

// encode encodes a frame built here, which is valid.
func encode(f agentwire.Frame) []byte {
	line, err := agentwire.Append(nil, f)
	if err != nil {
		panic(fmt.Sprintf("agentchan: encoding a %s frame: %v", agentwire.Type(f), err))
	}
	return line
}
