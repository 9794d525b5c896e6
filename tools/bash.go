package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// MaxBashTimeout is the longest timeout a bash call may ask for.
const MaxBashTimeout = time.Hour

// bashGrace is how long a call waits for msb to end after the terminal
// record arrived. A command that leaves a background process holding its
// output (`sleep 300 & echo started`) keeps the stream open; the call
// returns after the grace with the recorded status, and that process keeps
// running in the sandbox until it ends or the session is closed.
const bashGrace = 500 * time.Millisecond

var bashTool = tool{
	description: "Run a bash command in the workspace. Returns the combined stdout and stderr; a non-zero exit or a timeout is reported after the output. Default timeout 10 seconds, at most 3600.",
	schema: schema{
		{name: "command", kind: kindString, required: true, description: "Bash command to run"},
		{name: "timeout", kind: kindInteger, description: "Timeout in seconds (default 10, at most 3600)", min: 1, max: int64(MaxBashTimeout / time.Second),
			invalid: "bash timeout must be an integer from 1 through 3600 seconds"},
	},
	run: runBash,
}

// CommandError is a bash command that ran and failed: a non-zero exit or a
// timeout. Its text is the tool result an agent sees (output and note).
type CommandError struct {
	Text     string
	ExitCode int
	TimedOut bool
}

func (e *CommandError) Error() string { return e.Text }

func runBash(ctx context.Context, t *Toolbox, a args, progress Progress) (string, error) {
	command, _ := a.str("command")
	timeout := t.opTimeout
	if secs, ok := a.integer("timeout"); ok {
		timeout = time.Duration(secs) * time.Second
	}
	t.record("bash")
	return t.Bash(ctx, command, timeout, progress)
}

// Bash runs command through the bash tool's guest protocol and returns its
// result text, or a *CommandError for a non-zero exit or a guest timeout.
// progress, when set, receives the output as it streams.
func (t *Toolbox) Bash(ctx context.Context, command string, timeout time.Duration, progress Progress) (string, error) {
	token := bashproto.NewToken()
	pidFile := bashproto.PidFile(t.sess.Paths().Workspace, token)
	script, scriptArgs := bashproto.Script(command, timeout, pidFile, token)
	secs := bashproto.TimeoutSeconds(timeout)

	var mu sync.Mutex
	var output bytes.Buffer
	filter := bashproto.NewFilter(token, func(p []byte) {
		output.Write(p)
		if progress != nil {
			progress(bytes.Clone(p))
		}
	})
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var graceTimer *time.Timer
	onStdout := func(p []byte) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = filter.Write(p)
		if _, done := filter.Terminal(); done && graceTimer == nil {
			graceTimer = time.AfterFunc(bashGrace, func() { cancel(errGraceExpired) })
		}
	}
	// The in-guest timer is the real limit; msb's --timeout one second later
	// is a backstop, and the host deadline follows from it.
	res, err := t.sess.Shell(runCtx, session.Command{Script: script, Args: scriptArgs}, session.ShellOptions{
		Stdout:       onStdout,
		GuestTimeout: time.Duration(secs)*time.Second + time.Second,
	})
	mu.Lock()
	defer mu.Unlock()
	if graceTimer != nil {
		graceTimer.Stop()
	}
	_ = filter.Close()

	term, terminated := filter.Terminal()
	exit := 0
	switch {
	case err != nil && errors.Is(context.Cause(runCtx), errGraceExpired) && ctx.Err() == nil:
		// msb was still held open by a background process; the recorded
		// status stands in for msb's, and must be the only record.
		exit = term.Code
	case err != nil:
		t.killBash(ctx, pidFile, token)
		switch {
		case ctx.Err() != nil:
			return "", fmt.Errorf("bash: %w", session.ErrAborted)
		case errors.Is(err, session.ErrHostTimeout), errors.Is(err, session.ErrGuestTimeout):
			text := bashproto.FormatResult(output.Bytes(), 0, true, secs)
			return "", &CommandError{Text: text, TimedOut: true, ExitCode: bashproto.TimeoutExitCode}
		case errors.Is(err, session.ErrOutputOverflow):
			return "", fmt.Errorf("bash: command output exceeds the limit; the command was killed: %w", err)
		}
		return "", fmt.Errorf("bash: %w", err)
	default:
		exit = res.ExitCode
	}
	if verr := filter.Verdict(exit); verr != nil {
		if terminated && !term.Timeout && exit != term.Code {
			return "", fmt.Errorf("%w: the command's record says %v, the process exited %d", verr, term, exit)
		}
		return "", verr
	}
	text := bashproto.FormatResult(output.Bytes(), term.Code, term.Timeout, secs)
	if term.Timeout || term.Code != 0 {
		return "", &CommandError{Text: text, ExitCode: term.Code, TimedOut: term.Timeout}
	}
	return text, nil
}

var errGraceExpired = errors.New("output still open after the command completed")

// killBothScript runs the group kill, then the owner-tag cleanup that also
// reaches processes which left the group (setsid, double fork).
const killBothScript = `kill=$1 cleanup=$2
shift 2
/bin/bash -c "$kill" bash "$1"; k=$?
/bin/bash -c "$cleanup" bash "$2" "$3"; c=$?
[ "$k" -eq 0 ] && [ "$c" -eq 0 ]
`

// killBash ends the command's process group through its pid file, and every
// process carrying its owner tag: the second round trip, only when the call
// did not see the command end.
func (t *Toolbox) killBash(ctx context.Context, pidFile, token string) {
	kill, killArgs := bashproto.KillScript(pidFile)
	cleanup, cleanupArgs := glob.CleanupScript(bashproto.OwnerEnv, token)
	args := append([]string{kill, cleanup}, killArgs...)
	args = append(args, cleanupArgs...)
	res, err := t.sess.Shell(context.WithoutCancel(ctx), session.Command{Script: killBothScript, Args: args},
		session.ShellOptions{GuestTimeout: 5 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.logger.Warn("bash: could not kill the command's processes", "pidfile", pidFile, "err", err)
	}
}
