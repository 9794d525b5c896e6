package agentchan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// call is one Run in flight. The fields after ended are guarded by
// Conn.mu.
type call struct {
	id     uint64
	max    int64
	notify chan struct{} // cap 1: output, an exit, or an end arrived
	credit chan struct{} // cap 1: an ack arrived
	ended  chan struct{} // closed when Run returns

	total    int64 // output bytes the agent sent
	pending  []chunk
	exit     *agentwire.Exit
	overflow bool  // the host's own count passed max
	unacked  int64 // stdin bytes sent and not yet acknowledged
	stdinErr error
}

type chunk struct {
	fd   int
	data []byte
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run runs req in the guest and waits for it. It returns the Result
// whenever the command ran, together with an error wrapping ErrTimedOut or
// ErrOutputOverflow when it was killed for that. It fails with an error
// wrapping ctx.Err() as soon as ctx ends (the call is killed in the guest
// without waiting), ErrCannotStart when the agent could not start it, and
// ErrBroken when the channel died.
func (c *Conn) Run(ctx context.Context, req Request, out Output) (*Result, error) {
	run, err := runFrame(req)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cl := &call{max: run.MaxOutput, notify: make(chan struct{}, 1), credit: make(chan struct{}, 1), ended: make(chan struct{})}
	defer close(cl.ended)

	c.mu.Lock()
	if c.calls == nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.lastID++
	cl.id, run.ID = c.lastID, c.lastID
	line, err := agentwire.Append(nil, run)
	if err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("agentchan: %w", err)
	}
	c.calls[cl.id] = cl
	c.enqueueLocked(line)
	c.mu.Unlock()
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

	res := &Result{}
	deliver := func(chunks []chunk) {
		for _, ch := range chunks {
			switch {
			case ch.fd == 1 && out.Stdout != nil:
				out.Stdout(ch.data)
			case ch.fd == 1:
				res.Stdout = append(res.Stdout, ch.data...)
			case out.Stderr != nil:
				out.Stderr(ch.data)
			default:
				res.Stderr = append(res.Stderr, ch.data...)
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
		chunks := cl.pending
		cl.pending = nil
		exit, overflow, stdinErr, dead := cl.exit, cl.overflow, cl.stdinErr, c.calls == nil
		running := exit == nil && !overflow && stdinErr == nil
		c.mu.Unlock()

		switch {
		case running && dead:
			return nil, c.err
		case running && ctxErr != nil:
			return nil, fmt.Errorf("guest agent call: %w", ctxErr)
		case stdinErr != nil:
			return nil, stdinErr
		}
		deliver(chunks)
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
	cl, ok := c.calls[id]
	if !ok {
		if _, gaveUp := c.abandoned[id]; gaveUp {
			if _, isExit := f.(*agentwire.Exit); isExit {
				delete(c.abandoned, id)
			}
			return nil
		}
		if id > c.lastID {
			return fmt.Errorf("%s frame for call %d, which was never started", agentwire.Type(f), id)
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
			cl.pending = append(cl.pending, chunk{f.FD, data})
		}
		if cl.overflow {
			c.abandonLocked(cl)
		}
	case *agentwire.Ack:
		if f.N > cl.unacked {
			return fmt.Errorf("ack of %d bytes for call %d, which has %d unacknowledged", f.N, id, cl.unacked)
		}
		cl.unacked -= f.N
		poke(cl.credit)
	case *agentwire.Exit:
		delete(c.calls, id)
		cl.exit = f
	}
	poke(cl.notify)
	return nil
}

// pumpStdin streams in to call cl, keeping at most MaxStdinQueue bytes
// unacknowledged, until in ends or the call does. A Read that blocks keeps
// this goroutine until it returns.
func (c *Conn) pumpStdin(cl *call, in io.Reader) {
	buf := make([]byte, agentwire.MaxChunk)
	for {
		if !c.waitCredit(cl) {
			return
		}
		n, err := in.Read(buf)
		c.mu.Lock()
		if c.calls[cl.id] != cl {
			c.mu.Unlock()
			return
		}
		if n > 0 {
			cl.unacked += int64(n)
			// Encoded now, before buf is read into again: no copy.
			c.enqueueFrameLocked(&agentwire.Stdin{ID: cl.id, Data: buf[:n]})
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

// waitCredit waits until a whole chunk fits in cl's stdin window; false
// means the call or the channel ended.
func (c *Conn) waitCredit(cl *call) bool {
	for {
		c.mu.Lock()
		live := c.calls[cl.id] == cl
		fits := cl.unacked+agentwire.MaxChunk <= agentwire.MaxStdinQueue
		c.mu.Unlock()
		if !live {
			return false
		}
		if fits {
			return true
		}
		select {
		case <-cl.credit:
		case <-cl.ended:
			return false
		case <-c.dead:
			return false
		}
	}
}
