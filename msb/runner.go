package msb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultWaitDelay is how long Run waits for msb's output pipes to close
// after msb exited or was killed, when CLI.WaitDelay is 0. A background
// process that inherited the pipes cannot hold Run longer than this.
const DefaultWaitDelay = 2 * time.Second

// stderrTailSize bounds the stderr kept for error classification.
const stderrTailSize = 64 << 10

// hostEnvKeys are the only host variables msb inherits: enough to find its
// state directory and binaries, plus msb's own settings (its home, backend,
// cloud credentials and profile, config file, binary and libkrunfw paths,
// runtime tuning), so oma-sandbox and the user's own msb see the same
// sandboxes and the same backend. Nothing else from the host reaches msb.
var hostEnvKeys = []string{
	"HOME", "PATH", "TEMP", "TMP", "TMPDIR",
	"MSB_HOME", "MSB_BACKEND", "MSB_API_KEY", "MSB_API_URL", "MSB_PROFILE",
	"MSB_CONFIG_PATH", "MSB_PATH", "MSB_LIBKRUNFW_PATH",
	"MSB_KRUN_BOOT_TRACE", "MSB_KRUN_KERNEL_CMDLINE", "MSB_SHUTDOWN_FLUSH_TIMEOUT_MS",
}

// errOverflow is the cancellation cause the output cap uses.
var errOverflow = errors.New("output cap reached")

// Run starts msb with call.Args and waits for it. It returns the Result
// whenever msb ran, together with:
//   - an *ExitError when msb exited non-zero;
//   - an *OverflowError when stdout+stderr exceeded the cap;
//   - an error matching ErrHostTimeout and context.DeadlineExceeded when
//     ctx's deadline passed, or ErrAborted and context.Canceled when ctx
//     was cancelled.
//
// In the last three cases msb's whole process group was killed. Streaming
// callbacks get a private copy of each chunk and are never called
// concurrently with each other.
func (c *CLI) Run(ctx context.Context, call Call) (res *Result, err error) {
	args := slices.Clone(call.Args)
	for _, a := range args {
		if err := checkNUL("msb argument", a); err != nil {
			return nil, err
		}
	}
	limit := call.MaxOutput
	if limit <= 0 {
		limit = c.MaxOutput
	}
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	waitDelay := c.WaitDelay
	if waitDelay <= 0 {
		waitDelay = DefaultWaitDelay
	}

	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)

	cmd := exec.CommandContext(runCtx, c.path(), args...)
	cmd.Env = append(c.environ(), call.Env...)
	if call.Stdin != nil {
		// Hiding a possible *os.File makes exec copy through its own pipe
		// and close it at EOF, so msb never holds the caller's descriptor
		// open; nil leaves exec's /dev/null.
		cmd.Stdin = struct{ io.Reader }{call.Stdin}
	}
	out := &output{limit: limit, onOverflow: func() { stop(errOverflow) }}
	cmd.Stdout = &stream{out: out, fn: call.Stdout}
	cmd.Stderr = &stream{out: out, fn: call.Stderr, isStderr: true}
	setProcessGroup(cmd)
	var killed atomic.Bool
	cmd.Cancel = func() error {
		killed.Store(true)
		return killProcessGroup(cmd.Process, cmd.Env)
	}
	cmd.WaitDelay = waitDelay

	started := time.Now()
	if c.Logger != nil {
		defer func() {
			code := -1
			if res != nil {
				code = res.ExitCode
			}
			c.Logger.LogAttrs(ctx, slog.LevelDebug, "msb",
				slog.Any("args", redactArgs(args)),
				slog.Int("exit", code),
				slog.Duration("duration", time.Since(started)),
				slog.Any("err", err))
		}()
	}

	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return nil, contextError(args, ctx)
		}
		return nil, fmt.Errorf("msb %s: %w", subcommand(args), err)
	}
	waitErr := cmd.Wait()

	res = &Result{Args: args, ExitCode: cmd.ProcessState.ExitCode()}
	out.mu.Lock()
	res.Stdout = out.stdout.Bytes()
	res.Stderr = out.stderr.Bytes()
	tail := out.tail
	if len(tail) > stderrTailSize {
		tail = tail[len(tail)-stderrTailSize:]
	}
	tail = []byte(StripANSI(string(tail)))
	quiet := !out.sawStdout
	out.mu.Unlock()

	switch {
	case errors.Is(context.Cause(runCtx), errOverflow):
		return res, &OverflowError{Args: args, Limit: limit}
	case killed.Load():
		return res, contextError(args, ctx)
	}
	var exitErr *exec.ExitError
	switch {
	case waitErr == nil, errors.Is(waitErr, exec.ErrWaitDelay):
		// A leftover process kept the pipes open past msb's exit; msb's
		// own status still stands.
	case errors.As(waitErr, &exitErr):
	default:
		return res, fmt.Errorf("msb %s: %w", subcommand(args), waitErr)
	}
	if res.ExitCode == 0 {
		return res, nil
	}
	return res, newExitError(args, res.ExitCode, tail, quiet)
}

// contextError reports why ctx ended, matching both our sentinel and the
// context's own error.
func contextError(args []string, ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("msb %s: %w: %w", subcommand(args), ErrHostTimeout, context.Cause(ctx))
	}
	return fmt.Errorf("msb %s: %w: %w", subcommand(args), ErrAborted, context.Cause(ctx))
}

func (c *CLI) path() string {
	if c.Path != "" {
		return c.Path
	}
	if p := os.Getenv("OMA_MSB"); p != "" {
		return p
	}
	return "msb"
}

// environ builds msb's whole environment; see CLI.Env. Later entries win,
// so CLI.Env can override the inherited ones.
func (c *CLI) environ() []string {
	env := make([]string, 0, len(hostEnvKeys)+1+len(c.Env))
	for _, k := range hostEnvKeys {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, "NO_COLOR=1")
	return append(env, c.Env...)
}

// redactArgs hides exec --env values from logs: they may carry secrets.
func redactArgs(args []string) []string {
	if len(args) == 0 || args[0] != "exec" {
		return args
	}
	out := slices.Clone(args)
	for i := 1; i+1 < len(out) && out[i] != "--"; i++ {
		if out[i] == "--env" || out[i] == "-e" {
			k, _, _ := strings.Cut(out[i+1], "=")
			out[i+1] = k + "=<redacted>"
			i++
		}
	}
	return out
}

// output accounts for stdout and stderr together against one cap.
type output struct {
	mu         sync.Mutex
	limit      int64
	total      int64
	over       bool
	onOverflow func()
	stdout     bytes.Buffer // used only without a Stdout callback
	stderr     bytes.Buffer // used only without a Stderr callback
	tail       []byte       // last stderrTailSize bytes of stderr, always kept
	sawStdout  bool         // msb wrote on stdout
}

// stream is the io.Writer exec copies one of msb's pipes into.
type stream struct {
	out      *output
	fn       func([]byte)
	isStderr bool
}

func (s *stream) Write(p []byte) (int, error) {
	o := s.out
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.over {
		// Keep draining so the writer is not blocked while it is killed.
		return len(p), nil
	}
	chunk := p
	if room := o.limit - o.total; int64(len(chunk)) > room {
		chunk = chunk[:room]
		o.over = true
	}
	o.total += int64(len(chunk))
	if len(chunk) > 0 {
		if s.isStderr {
			o.keepTail(chunk)
		} else {
			o.sawStdout = true
		}
		switch {
		case s.fn != nil:
			s.fn(bytes.Clone(chunk))
		case s.isStderr:
			o.stderr.Write(chunk)
		default:
			o.stdout.Write(chunk)
		}
	}
	if o.over {
		o.onOverflow()
	}
	return len(p), nil
}

func (o *output) keepTail(p []byte) {
	o.tail = append(o.tail, p...)
	// Trim in batches so appends stay amortised.
	if len(o.tail) > 2*stderrTailSize {
		o.tail = append(o.tail[:0], o.tail[len(o.tail)-stderrTailSize:]...)
	}
}
