package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// StdioOptions tune OpenStdio.
type StdioOptions struct {
	// Workdir defaults to the workspace.
	Workdir string
	// Timeout bounds the whole conversation; 0 means the session's
	// wall-time limit, if any.
	Timeout time.Duration
	// MaxOutput caps stdout+stderr over the whole conversation; 0 means
	// the session's output limit, else DefaultMaxOutput.
	MaxOutput int64
}

// Stdio is a line-framed conversation with one command in the sandbox:
// each frame is one line on its stdin or stdout. Its stderr is drained and
// counted against the output cap. The output cap and timeout kill the
// command, as Shell's do.
type Stdio struct {
	stdin  *os.File
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever frames or end change
	frames  []string
	partial []byte
	ended   bool
	endErr  error
}

// OpenStdio starts cmd in a fresh sandbox for a line-framed conversation.
// The conversation outlives ctx, which bounds only the start; a sandbox
// that fails to start reports it through Receive and Send. It is a call
// of the session's while it lasts: it resumes a paused session (or fails
// with session.ErrPaused), and Pause waits for it to end.
func (s *Session) OpenStdio(ctx context.Context, cmd session.Command, opts StdioOptions) (*Stdio, error) {
	workdir, err := s.workdir(opts.Workdir)
	if err != nil {
		return nil, err
	}
	cctx, endCall, err := s.begin(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		endCall()
		return nil, ctxError(ctx)
	}
	// A call of the session's for as long as it runs: it resumes a paused
	// session (or fails with ErrPaused), and a Pause waits for it.
	release, err := s.wake(ctx)
	if err != nil {
		endCall()
		return nil, err
	}
	end := func() { release(); endCall() }
	// As for Shell: no sandbox starts over a box being removed.
	if s.removing() {
		end()
		return nil, s.gone()
	}
	limits := s.limits()
	l, err := s.plat.launch(call{
		name: s.rec.Name, dirs: s.dirs, policy: s.rec.Policy, limits: limits, env: s.env, workdir: workdir,
		refused: s.countRefusal,
		argv:    append([]string{"/bin/bash", "-c", cmd.Script, "bash"}, cmd.Args...),
	})
	if err != nil {
		end()
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		end()
		l.finish()
		return nil, fmt.Errorf("local sandbox: stdio pipe: %v: %w", err, session.ErrCannotStart)
	}
	rctx, cancel := context.WithCancelCause(cctx)
	st := &Stdio{stdin: inW, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{})}
	s.emit(AuditStarted, nil)
	go func() {
		defer close(st.done)
		defer end()
		res, err := run(rctx, runSpec{
			cmd: l.cmd, marker: l.marker, start: l.start, stdin: inR, stdout: st.feed, stderr: func([]byte) {},
			maxOutput:    minPositive(opts.MaxOutput, limits.OutputBytes, DefaultMaxOutput),
			guestTimeout: minPositive(opts.Timeout, limits.WallTime),
		})
		inR.Close()
		l.finish()
		s.emit(AuditCompleted, res)
		if err == nil {
			err = fmt.Errorf("stdio command exited with %d: %w", res.ExitCode, io.EOF)
		}
		st.finish(err)
	}()
	return st, nil
}

// feed splits stdout into frames.
func (st *Stdio) feed(b []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.partial = append(st.partial, b...)
	for {
		i := bytes.IndexByte(st.partial, '\n')
		if i < 0 {
			break
		}
		st.frames = append(st.frames, string(st.partial[:i]))
		st.partial = st.partial[i+1:]
	}
	st.notify()
}

func (st *Stdio) finish(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ended, st.endErr = true, err
	st.notify()
}

// notify wakes waiters; st.mu is held.
func (st *Stdio) notify() {
	close(st.changed)
	st.changed = make(chan struct{})
}

// Send writes one frame and its newline. A frame containing CR or LF is
// refused: it would be read as more than one.
func (st *Stdio) Send(ctx context.Context, frame string) error {
	if strings.ContainsAny(frame, "\r\n") {
		return &PolicyError{Field: "stdio frame", Value: frame, Reason: "frames cannot contain line breaks"}
	}
	st.mu.Lock()
	ended, endErr := st.ended, st.endErr
	st.mu.Unlock()
	if ended {
		return endErr
	}
	stop := context.AfterFunc(ctx, func() { _ = st.stdin.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := st.stdin.Write([]byte(frame + "\n")); err != nil {
		if ctx.Err() != nil {
			// Half a frame may be out: the conversation cannot go on.
			st.cancel(session.ErrAborted)
			return ctxError(ctx)
		}
		return fmt.Errorf("stdio send: %w", err)
	}
	return nil
}

// Receive returns the next frame from stdout. Frames already received are
// returned even after the command ended; then the end's error follows
// (io.EOF after a normal exit).
func (st *Stdio) Receive(ctx context.Context) (string, error) {
	for {
		st.mu.Lock()
		if len(st.frames) > 0 {
			f := st.frames[0]
			st.frames = st.frames[1:]
			st.mu.Unlock()
			return f, nil
		}
		ended, endErr, changed := st.ended, st.endErr, st.changed
		st.mu.Unlock()
		if ended {
			return "", endErr
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", ctxError(ctx)
		}
	}
}

// Close kills the command and waits for it, bounded by the kill's own
// grace period. Idempotent.
func (st *Stdio) Close() error {
	st.cancel(session.ErrClosed)
	<-st.done
	st.stdin.Close()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.endErr != nil && !errors.Is(st.endErr, io.EOF) && !errors.Is(st.endErr, session.ErrClosed) {
		return st.endErr
	}
	return nil
}
