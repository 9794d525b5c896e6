package agentchan

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// call is one Run in flight. The fields after ended are guarded by
// Conn.mu.
type call struct {
	id     uint64
	max    int64
	notify chan struct{} // cap 1: output, an exit, or an end arrived
	ended  chan struct{} // closed when Run returns

	total    int64 // output bytes the agent sent
	exit     *agentwire.Exit
	overflow bool  // the host's own count passed max
	queued   int64 // stdin bytes queued, not yet handed to the pipe
	unacked  int64 // stdin bytes handed to the pipe, not yet acknowledged
	stdinErr error
	pending  []chunk // output not yet delivered, in order
}

// A chunk is one frame's output (fd 1 or 2), its bytes as the frame decoded
// them, or, for fd 0, frames under packMin bytes packed together, each a
// uvarint of its length<<1 | fd-1 and then its bytes: an agent sending
// one-byte frames costs the host two bytes each, not a chunk (about 40
// bytes of heap), and a large frame is not copied.
type chunk struct {
	fd   int
	data []byte
}

const packMin = 256

// appendOutput adds a frame's data to pending.
func appendOutput(pending []chunk, fd int, data []byte) []chunk {
	if len(data) >= packMin {
		return append(pending, chunk{fd, data})
	}
	if len(pending) == 0 || pending[len(pending)-1].fd != 0 {
		pending = append(pending, chunk{})
	}
	last := &pending[len(pending)-1]
	last.data = binary.AppendUvarint(last.data, uint64(len(data))<<1|uint64(fd-1))
	last.data = append(last.data, data...)
	return pending
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// KilledExitCode is the exit code of a call the host gave up on: a shell's
// status for SIGKILL.
const KilledExitCode = 137

// Run runs req in the guest and waits for it. It returns the Result
// whenever the command ran, together with an error wrapping ErrTimedOut or
// ErrOutputOverflow when it was killed for that. It fails with an error
// wrapping ctx.Err() as soon as ctx ends (the call is killed in the guest
// without waiting; the Result holds the output so far and
// KilledExitCode), ErrCannotStart when the agent could not start it, and
// ErrBroken when the channel died.
func (c *Conn) Run(ctx context.Context, req Request, out Output) (res *Result, err error) {
	run, err := runFrame(req)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cl := &call{max: run.MaxOutput, notify: make(chan struct{}, 1), ended: make(chan struct{})}
	defer close(cl.ended)
	if err := c.start(ctx, cl, run); err != nil {
		return nil, err
	}
	// Two events on the caller's span (a tool call's), however much the
	// call printed: its id on the channel and what the guest said of it.
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("agent call", trace.WithAttributes(attrCallID.Int64(int64(cl.id)), attrBuiltin.String(req.Builtin)))
		defer func() { span.AddEvent("agent call ended", trace.WithAttributes(c.endAttrs(ctx, cl, res, err)...)) }()
	}
	defer func() {
		// Whatever ended Run (even a panicking callback), the guest must
		// not keep running a call nobody waits for.
		c.mu.Lock()
		c.abandonLocked(cl)
		c.mu.Unlock()
	}()
	if req.Stdin != nil {
		go c.pumpStdin(cl, req.Stdin)
	}

	res = &Result{}
	emit := func(stdout bool, data []byte) {
		switch {
		case stdout && out.Stdout != nil:
			out.Stdout(data)
		case stdout:
			res.Stdout = append(res.Stdout, data...)
		case out.Stderr != nil:
			out.Stderr(data)
		default:
			res.Stderr = append(res.Stderr, data...)
		}
	}
	deliver := func(pending []chunk) {
		for _, ch := range pending {
			if ch.fd != 0 {
				emit(ch.fd == 1, ch.data)
				continue
			}
			for p := ch.data; len(p) > 0; {
				head, n := binary.Uvarint(p)
				end := n + int(head>>1)
				// Capped, so that a callee appending to its chunk cannot
				// write over the next one.
				emit(head&1 == 0, p[n:end:end])
				p = p[end:]
			}
		}
	}
	for {
		var ctxErr error
		select {
		case <-cl.notify:
		case <-c.dead:
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
		c.mu.Lock()
		pending := cl.pending
		cl.pending = nil
		exit, overflow, stdinErr, dead := cl.exit, cl.overflow, cl.stdinErr, c.calls == nil
		running := exit == nil && !overflow && stdinErr == nil
		c.mu.Unlock()

		switch {
		case running && dead:
			return nil, c.err
		case running && ctxErr != nil:
			// The output so far, as a killed command leaves it.
			deliver(pending)
			res.ExitCode = KilledExitCode
			return res, fmt.Errorf("guest agent call: %w", ctxErr)
		case stdinErr != nil:
			return nil, stdinErr
		}
		deliver(pending)
		switch {
		case overflow:
			return res, fmt.Errorf("%w: more than %d bytes of output", ErrOutputOverflow, cl.max)
		case exit == nil:
			continue
		case exit.Error != "":
			return nil, fmt.Errorf("%w: %q", ErrCannotStart, exit.Error)
		}
		res.ExitCode = exit.Code
		switch {
		case exit.TimedOut:
			return res, fmt.Errorf("%w after %s", ErrTimedOut, req.Timeout)
		case exit.Overflow:
			return res, fmt.Errorf("%w: more than %d bytes of output", ErrOutputOverflow, cl.max)
		}
		return res, nil
	}
}

// endAttrs describe how cl ended, without a byte of what it printed.
func (c *Conn) endAttrs(ctx context.Context, cl *call, res *Result, err error) []attribute.KeyValue {
	c.mu.Lock()
	total := cl.total
	c.mu.Unlock()
	outcome := "exited"
	switch {
	case errors.Is(err, ErrTimedOut):
		outcome = "timed_out"
	case errors.Is(err, ErrOutputOverflow):
		outcome = "output_overflow"
	case errors.Is(err, ErrCannotStart):
		outcome = "cannot_start"
	case ctx.Err() != nil && err != nil:
		outcome = "cancelled"
	case err != nil:
		outcome = "channel_broken"
	}
	attrs := []attribute.KeyValue{attrOutcome.String(outcome), attrOutputBytes.Int64(total)}
	if res != nil {
		attrs = append(attrs, attrExitCode.Int(res.ExitCode))
	}
	return attrs
}

// start queues cl's run frame once the queue has room for it, and
// registers cl. Ids are given in queue order: the agent requires them to
// increase.
func (c *Conn) start(ctx context.Context, cl *call, run *agentwire.Run) error {
	run.ID = math.MaxUint64 // the longest line an id can make
	longest, err := agentwire.Append(nil, run)
	if err != nil {
		return fmt.Errorf("agentchan: %w", err)
	}
	for {
		c.mu.Lock()
		if c.calls == nil {
			c.mu.Unlock()
			return c.err
		}
		if c.queued == 0 || c.queued+len(longest) <= maxQueued {
			c.lastID++
			cl.id, run.ID = c.lastID, c.lastID
			c.calls[cl.id] = cl
			c.enqueueLocked(outgoing{line: encode(run), run: cl.id})
			c.mu.Unlock()
			return nil
		}
		progress := c.progress
		c.mu.Unlock()
		select {
		case <-progress:
		case <-c.dead:
		case <-ctx.Done():
			return fmt.Errorf("guest agent call: waiting for the agent to read: %w", ctx.Err())
		}
	}
}

// runFrame checks req and builds its frame (without an id yet).
func runFrame(req Request) (*agentwire.Run, error) {
	if req.Timeout < 0 {
		return nil, fmt.Errorf("agentchan: negative timeout %s", req.Timeout)
	}
	if req.MaxOutput < 0 {
		return nil, fmt.Errorf("agentchan: negative output cap %d", req.MaxOutput)
	}
	run := &agentwire.Run{
		Script:    []byte(req.Script),
		Builtin:   req.Builtin,
		User:      req.User,
		Workdir:   req.Workdir,
		MaxOutput: req.MaxOutput,
		Stdin:     req.Stdin != nil,
	}
	if run.MaxOutput == 0 {
		run.MaxOutput = DefaultMaxOutput
	}
	if req.Timeout > 0 {
		// Rounded up: a guest timer never fires before the one asked for.
		run.TimeoutMS = int64(req.Timeout / time.Millisecond)
		if req.Timeout%time.Millisecond != 0 {
			run.TimeoutMS++
		}
	}
	for _, a := range req.Args {
		run.Args = append(run.Args, []byte(a))
	}
	run.ID = 1 // checked with a placeholder id
	if err := agentwire.Validate(run); err != nil {
		return nil, fmt.Errorf("agentchan: %w", err)
	}
	return run, nil
}

// abandonLocked gives up on cl: the agent is told to kill it, and what it
// still sends for it is dropped. c.mu is held.
func (c *Conn) abandonLocked(cl *call) {
	if c.calls[cl.id] != cl {
		return
	}
	delete(c.calls, cl.id)
	c.abandoned[cl.id] = struct{}{}
	c.enqueueFrameLocked(&agentwire.Kill{ID: cl.id})
}

// dispatch applies one frame from the agent; an error is a protocol
// violation.
func (c *Conn) dispatch(f agentwire.Frame) error {
	id := agentwire.CallID(f)
	c.mu.Lock()
	defer c.mu.Unlock()
	if id > c.sentID {
		// Even a call in c.calls: its run frame still waits in the queue.
		return fmt.Errorf("%s frame for call %d, which was never started", agentwire.Type(f), id)
	}
	cl, ok := c.calls[id]
	if !ok {
		if _, gaveUp := c.abandoned[id]; gaveUp {
			if _, isExit := f.(*agentwire.Exit); isExit {
				delete(c.abandoned, id)
			}
			return nil
		}
		return fmt.Errorf("%s frame for call %d, which has ended", agentwire.Type(f), id)
	}
	switch f := f.(type) {
	case *agentwire.Out:
		data := f.Data
		if room := cl.max - cl.total; int64(len(data)) > room {
			// The host's own count: the agent may not honour the cap.
			data = data[:room]
			cl.overflow = true
		}
		cl.total += int64(len(data))
		if len(data) > 0 {
			cl.pending = appendOutput(cl.pending, f.FD, data)
		}
		if cl.overflow {
			c.abandonLocked(cl)
		}
	case *agentwire.Ack:
		if f.N > cl.unacked {
			return fmt.Errorf("ack of %d bytes for call %d, which has %d unacknowledged", f.N, id, cl.unacked)
		}
		cl.unacked -= f.N
		c.progressLocked()
	case *agentwire.Exit:
		delete(c.calls, id)
		cl.exit = f
	}
	poke(cl.notify)
	return nil
}

// pumpStdin streams in to call cl until in ends or the call does. A chunk
// is read only when it fits in cl's window (its queued and unacknowledged
// stdin within agentwire.MaxStdinQueue), and queued only while the
// channel's queue is within that much too, so however the agent acks, a
// call holds at most its window of stdin. A Read that blocks keeps this
// goroutine until it returns.
func (c *Conn) pumpStdin(cl *call, in io.Reader) {
	buf := make([]byte, agentwire.MaxChunk)
	for {
		c.mu.Lock()
		live := c.waitLocked(cl, func() bool { return cl.queued+cl.unacked+agentwire.MaxChunk <= agentwire.MaxStdinQueue })
		c.mu.Unlock()
		if !live {
			return
		}
		n, err := in.Read(buf)
		var line []byte
		if n > 0 {
			// Encoded now, before buf is read into again: no copy.
			line = encode(&agentwire.Stdin{ID: cl.id, Data: buf[:n]})
		}
		c.mu.Lock()
		if !c.waitLocked(cl, func() bool { return c.queued == 0 || c.queued+len(line) <= agentwire.MaxStdinQueue }) {
			c.mu.Unlock()
			return
		}
		if n > 0 {
			cl.queued += int64(n)
			c.enqueueLocked(outgoing{line: line, stdin: cl, n: int64(n)})
		}
		switch {
		case errors.Is(err, io.EOF):
			c.enqueueFrameLocked(&agentwire.EOF{ID: cl.id})
		case err != nil:
			cl.stdinErr = fmt.Errorf("agentchan: reading stdin: %w", err)
			c.abandonLocked(cl)
			poke(cl.notify)
		}
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// waitLocked waits, c.mu held, until fits or cl ends; false means cl or
// the channel ended.
func (c *Conn) waitLocked(cl *call, fits func() bool) bool {
	for c.calls[cl.id] == cl {
		if fits() {
			return true
		}
		progress := c.progress
		c.mu.Unlock()
		select {
		case <-progress:
		case <-cl.ended:
		case <-c.dead:
		}
		c.mu.Lock()
	}
	return false
}
