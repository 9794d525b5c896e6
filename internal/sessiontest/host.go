// Package sessiontest provides a session.Session that runs guest commands
// on the host in a temporary directory tree: a command that names a
// builtin runs as the guest agent's builtin, any other with the host's
// bash. It has no isolation at all: it exists so the tool layer's logic
// can be tested quickly and directly; the backends' own suites prove
// isolation.
package sessiontest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Host is a session.Session rooted in a temporary directory.
type Host struct {
	root  string
	paths session.Paths
	calls atomic.Int64

	mu          sync.Mutex
	closed      bool
	poisonCause error // why the session was poisoned; nil while it is not
}

var _ session.Session = (*Host)(nil)

// NewHost makes the directory tree under t.TempDir().
func NewHost(t testing.TB) *Host {
	root := t.TempDir()
	h := &Host{root: root, paths: session.Paths{
		Workspace: filepath.Join(root, "workspace"),
		Uploads:   filepath.Join(root, "uploads"),
		Outputs:   filepath.Join(root, "outputs"),
		Skills:    filepath.Join(root, "workspace", "skills"),
	}}
	for _, d := range []string{h.paths.Workspace, h.paths.Uploads, h.paths.Outputs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// Calls counts Shell and CopyIn calls: the stand-in for msb invocations.
func (h *Host) Calls() int64 { return h.calls.Load() }

func (h *Host) Name() string         { return "host-" + filepath.Base(h.root) }
func (h *Host) Paths() session.Paths { return h.paths }

// Poisoned reports whether Poison was called.
func (h *Host) Poisoned() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.poisonCause != nil
}

// Poison follows the Session contract: the session becomes unusable and
// its files stay where they are until Close (which, here, removes nothing:
// the tree belongs to the test's TempDir).
func (h *Host) Poison(_ context.Context, cause error) error {
	if cause == nil {
		cause = errors.New("state unknown")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.poisonCause == nil {
		h.poisonCause = cause
	}
	return h.poisonedError()
}

// poisonedError says why the session is unusable and where its files are;
// h.mu must be held.
func (h *Host) poisonedError() error {
	return fmt.Errorf("%w (%v): the files are kept in %s until the session is closed", session.ErrPoisoned, h.poisonCause, h.root)
}

// usable is the error a call on the session gets, or nil.
func (h *Host) usable() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.poisonCause != nil:
		return h.poisonedError()
	case h.closed:
		return session.ErrClosed
	}
	return nil
}

func (h *Host) Close(context.Context) error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	return nil
}

func (h *Host) CopyIn(ctx context.Context, hostPath, guestPath string) error {
	if err := h.usable(); err != nil {
		return err
	}
	h.calls.Add(1)
	return exec.CommandContext(ctx, "cp", "-r", hostPath, guestPath).Run()
}

// Shell runs the command in its own process group and kills the group when
// ctx ends, the guest timeout fires or the output cap is hit: a Builtin as
// the guest agent's builtin (see command), else the Script with bash.
func (h *Host) Shell(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	if err := h.usable(); err != nil {
		return nil, err
	}
	h.calls.Add(1)
	if opts.GuestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.GuestTimeout)
		defer cancel()
	}
	c, err := command(cmd)
	if err != nil {
		return nil, err
	}
	c.Dir = opts.Workdir
	if c.Dir == "" {
		c.Dir = h.paths.Workspace
	}
	setProcessGroup(c)
	// A background process may keep the output pipes open, as in a guest.
	c.WaitDelay = time.Second
	c.Stdin = opts.Stdin
	if c.Stdin == nil {
		c.Stdin = bytes.NewReader(nil)
	}
	limit := opts.MaxOutput
	if limit == 0 {
		limit = 16 << 20
	}
	var stdout, stderr bytes.Buffer
	w := &capWriter{limit: limit}
	w.out = writerFor(&stdout, opts.Stdout, w)
	w.err = writerFor(&stderr, opts.Stderr, w)
	c.Stdout, c.Stderr = w.out, w.err
	if err := c.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		stop(c, cmd.Builtin != "", done)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, session.ErrGuestTimeout
		}
		return nil, fmt.Errorf("%w: %w", session.ErrAborted, context.Cause(ctx))
	case <-w.overflow():
		stop(c, cmd.Builtin != "", done)
		return nil, session.ErrOutputOverflow
	}
	killProcessGroup(c)
	res := &session.Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var exitErr *exec.ExitError
	if errors.As(waitErr, &exitErr) {
		res.ExitCode = exitErr.ExitCode()
		if res.ExitCode < 0 {
			res.ExitCode = 255
		}
	} else if waitErr != nil {
		return nil, waitErr
	}
	return res, nil
}

// stop ends a command that has not ended, done giving its Wait's error. A
// builtin is first asked to end, as a kill frame asks the agent (SIGTERM:
// a supervisor then kills its command's tree, which left the process
// group), and given up to five seconds; then the process group is killed.
func stop(c *exec.Cmd, builtin bool, done <-chan error) {
	if builtin {
		terminate(c)
		select {
		case <-done:
			killProcessGroup(c)
			return
		case <-time.After(5 * time.Second):
		}
	}
	killProcessGroup(c)
	<-done
}

type capWriter struct {
	mu       sync.Mutex
	limit    int64
	n        int64
	over     chan struct{}
	once     sync.Once
	out, err io.Writer
}

func (w *capWriter) overflow() <-chan struct{} {
	w.once.Do(func() { w.over = make(chan struct{}) })
	return w.over
}

type streamWriter struct {
	cap *capWriter
	buf *bytes.Buffer
	fn  func([]byte)
}

func writerFor(buf *bytes.Buffer, fn func([]byte), w *capWriter) io.Writer {
	w.overflow()
	return &streamWriter{cap: w, buf: buf, fn: fn}
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.cap.mu.Lock()
	defer s.cap.mu.Unlock()
	s.cap.n += int64(len(p))
	if s.cap.n > s.cap.limit {
		select {
		case <-s.cap.over:
		default:
			close(s.cap.over)
		}
		return 0, errors.New("output cap")
	}
	if s.fn != nil {
		s.fn(bytes.Clone(p))
	} else {
		s.buf.Write(p)
	}
	return len(p), nil
}
