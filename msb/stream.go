package msb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"
)

// Starter starts msb invocations that keep running after the call that
// started them, such as `exec --stream` serving a channel. *CLI is one.
type Starter interface {
	Start(ctx context.Context, c Call) (*Process, error)
}

// ErrNoStarter reports a Client whose Runner cannot start long-lived msb
// processes.
var ErrNoStarter = errors.New("msb runner cannot start long-lived processes")

// Process is a running msb invocation whose stdin and stdout the caller
// holds: write to Stdin, read Stdout, then Stop (or Kill and Wait). Its
// stderr is kept, bounded, for Wait's error. Nothing it started outlives
// Stop or Kill: msb runs in its own process group, which they kill, and it
// dies with the host's thread that started it (see dieWithParent).
type Process struct {
	// Stdin is msb's stdin; Close sends it end of file.
	Stdin io.WriteCloser
	// Stdout is msb's stdout. It ends when msb and everything that
	// inherited the pipe are gone.
	Stdout io.ReadCloser

	args   []string
	cmd    *exec.Cmd
	stderr *tailWriter
	done   chan struct{} // closed once msb was waited for
	err    error         // Wait's answer; set before done closes
	killed bool          // guarded by mu; Kill was called before msb exited
	mu     sync.Mutex
}

// Start starts msb with call.Args and returns at once. call.Stdin,
// call.Stdout, call.Stderr and call.MaxOutput must be unset: the Process
// carries the streams. ctx only bounds the start; the process runs until
// it exits, Stop or Kill.
func (c *CLI) Start(ctx context.Context, call Call) (*Process, error) {
	args := slices.Clone(call.Args)
	for _, a := range args {
		if err := checkNUL("msb argument", a); err != nil {
			return nil, err
		}
	}
	if call.Stdin != nil || call.Stdout != nil || call.Stderr != nil || call.MaxOutput != 0 {
		return nil, invalid("call", subcommand(args), "a started process carries its own streams; Stdin, Stdout, Stderr and MaxOutput must be unset")
	}
	if err := ctx.Err(); err != nil {
		return nil, contextError(args, ctx)
	}
	waitDelay := c.WaitDelay
	if waitDelay <= 0 {
		waitDelay = DefaultWaitDelay
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("msb %s: %w", subcommand(args), err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("msb %s: %w", subcommand(args), err)
	}
	cmd := exec.Command(c.path(), args...)
	cmd.Env = append(c.environ(), call.Env...)
	cmd.Stdin, cmd.Stdout = inR, outW
	p := &Process{Stdin: inW, Stdout: outR, args: args, cmd: cmd, stderr: &tailWriter{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.WaitDelay = waitDelay
	setProcessGroup(cmd)
	err = cmd.Start()
	// msb has its own copies of these ends now.
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("msb %s: %w", subcommand(args), err)
	}
	started := time.Now()
	go func() {
		waitErr := cmd.Wait()
		p.err = p.result(waitErr)
		if c.Logger != nil {
			c.Logger.LogAttrs(context.Background(), slog.LevelDebug, "msb",
				slog.Any("args", redactArgs(args)),
				slog.Int("exit", cmd.ProcessState.ExitCode()),
				slog.Duration("duration", time.Since(started)),
				slog.Any("err", p.err))
		}
		close(p.done)
	}()
	return p, nil
}

// result maps cmd.Wait's answer as Run does: a signal death after Kill is
// ErrAborted; a non-zero exit an *ExitError classified from stderr.
func (p *Process) result(waitErr error) error {
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	if killed {
		return fmt.Errorf("msb %s: %w: killed", subcommand(p.args), ErrAborted)
	}
	var exitErr *exec.ExitError
	switch {
	case waitErr == nil, errors.Is(waitErr, exec.ErrWaitDelay):
	case errors.As(waitErr, &exitErr):
	default:
		return fmt.Errorf("msb %s: %w", subcommand(p.args), waitErr)
	}
	code := p.cmd.ProcessState.ExitCode()
	if code == 0 {
		return nil
	}
	tail := []byte(StripANSI(string(p.stderr.bytes())))
	// Its stdout is the caller's to read: whether msb wrote on it is not
	// known here. (The channel's agent frames what the guest writes.)
	return newExitError(p.args, code, tail, true)
}

// Done is closed once msb has exited and been waited for.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for msb to exit and returns nil for exit 0, an *ExitError
// for another exit (its Stderr the last 64 KiB of msb's stderr), or an
// error matching ErrAborted after Kill.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// ExitCode is msb's exit status once Done is closed, -1 before or after a
// signal.
func (p *Process) ExitCode() int {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// Stderr returns the last 64 KiB msb wrote on stderr so far.
func (p *Process) Stderr() []byte { return p.stderr.bytes() }

// Kill SIGKILLs msb's whole process group; it does not wait for msb to
// exit, only (5 s at most) for no msb to be opening its database.
func (p *Process) Kill() {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return
	default:
	}
	p.killed = true
	p.mu.Unlock()
	_ = killProcessGroup(p.cmd.Process, p.cmd.Env)
}

// Stop ends msb gently, then surely: it closes stdin (msb ends the guest
// command at end of file), waits up to grace for msb to exit, kills its
// process group if it has not, waits for it and closes Stdout. It returns
// Wait's answer.
func (p *Process) Stop(grace time.Duration) error {
	_ = p.Stdin.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.Kill()
	}
	err := p.Wait()
	_ = p.Stdout.Close()
	return err
}

// tailWriter keeps the last stderrTailSize bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
}

func (w *tailWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	// Trim in batches so appends stay amortised.
	if len(w.buf) > 2*stderrTailSize {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-stderrTailSize:]...)
	}
	return len(b), nil
}

func (w *tailWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.buf
	if len(b) > stderrTailSize {
		b = b[len(b)-stderrTailSize:]
	}
	return slices.Clone(b)
}

// ExecStream starts `msb exec --stream ...` and keeps it running; see
// Process. o.Stream is implied.
func (c *Client) ExecStream(ctx context.Context, o ExecOptions) (*Process, error) {
	o.Stream = true
	args, err := o.Args()
	if err != nil {
		return nil, err
	}
	s, ok := c.runner().(Starter)
	if !ok {
		return nil, ErrNoStarter
	}
	return s.Start(ctx, Call{Args: args})
}
