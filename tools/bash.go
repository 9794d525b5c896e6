package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// MaxBashTimeout is the longest timeout a bash call may ask for.
const MaxBashTimeout = time.Hour

// DefaultBashTimeout is a bash call's timeout when it names none (or 0).
// The seed used its 10 s operation timeout, which a cold build or test run
// nearly exceeds; two minutes is what coding agents' own bash tools give.
const DefaultBashTimeout = 2 * time.Minute

// Bash results show at most this much of the output: its last lines.
// bashproto.Tail with these limits tells which end of a streamed output
// a result shows.
const (
	BashMaxLines = readMaxLines
	BashMaxBytes = readMaxBytes
)

var bashTool = tool{
	description: "Run a bash command in the workspace. Returns the combined stdout and stderr; " +
		"a non-zero exit or a timeout is reported after the output. Only the last 2000 lines or 50KB of the output are returned, " +
		"with the path of a file holding all of it. Each call is a fresh shell: cd, export and shell variables do not carry over " +
		"to the next call; files do. Timeout in seconds: default 120, at most 3600. On a timeout or abort every process the " +
		"command started is killed. Background processes (`cmd &`) keep running after the call, their output going to the log " +
		"file the result names (\"[Background processes are still running; …]\"), unless the session runs each call in a " +
		"sandbox of its own: then they are killed with the call (\"[Background processes were killed: …]\").",
	schema: schema{
		{name: "command", kind: kindString, required: true, description: "Bash command to run"},
		{name: "timeout", kind: kindInteger, description: "Timeout in seconds (default 120, at most 3600; 0 means the default)", min: 0, max: int64(MaxBashTimeout / time.Second),
			invalid: "bash timeout must be an integer from 0 through 3600 seconds"},
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
	if strings.IndexByte(command, 0) >= 0 {
		return "", inputErrorf("bash", "bash command must not contain a NUL byte")
	}
	timeout := t.bashTimeout
	if secs, ok := a.integer("timeout"); ok && secs > 0 {
		timeout = time.Duration(secs) * time.Second
	}
	t.record("bash")
	return t.Bash(ctx, command, timeout, progress)
}

// Bash runs command through the bash tool's guest protocol and returns its
// result text, or a *CommandError for a non-zero exit or a timeout.
// progress, when set, receives the whole output as it streams; the result
// keeps only its tail.
func (t *Toolbox) Bash(ctx context.Context, command string, timeout time.Duration, progress Progress) (string, error) {
	call := t.bashCall()
	defer t.bashDone(call)
	logs := bashproto.LogsIn(t.sess.Paths().Workspace)
	keptPath := call.LogPath(logs.Kept)
	scoped, _ := t.sess.(callScoped)
	supervisorArgs, stdin := bashproto.Args(call, command, timeout, logs, bashproto.Limits{
		MaxLines: BashMaxLines, MaxBytes: BashMaxBytes, EndBackground: scoped != nil && scoped.ProcessesEndWithCall()})
	secs := bashproto.TimeoutSeconds(timeout)

	var mu sync.Mutex
	tail := bashproto.NewTail(BashMaxBytes)
	filter := bashproto.NewFilter(call.Secret, func(p []byte) {
		_, _ = tail.Write(p)
		if progress != nil {
			progress(bytes.Clone(p))
		}
	})
	onStdout := func(p []byte) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = filter.Write(p)
	}
	// The supervisor's timer is the real limit; the backend's one is a
	// backstop two seconds later, and the host deadline follows from it.
	began := time.Now()
	res, err := t.sess.Shell(ctx, session.Command{Builtin: agentwire.BuiltinBashSupervisor, Args: supervisorArgs}, session.ShellOptions{
		Stdin:        bytes.NewReader(stdin),
		Stdout:       onStdout,
		GuestTimeout: time.Duration(secs)*time.Second + 2*time.Second,
	})
	mu.Lock()
	defer mu.Unlock()
	_ = filter.Close()
	shown := tail.Show(BashMaxLines)
	notes := []string{}
	if n := shown.Note(BashMaxBytes, keptPath); n != "" {
		notes = append(notes, n)
	}
	if res != nil {
		notes = append(notes, sessionNotes(res.Stderr)...)
	}

	if err != nil && !nothingStarted(err) {
		if cerr := t.killBash(ctx, call); cerr != nil {
			return "", fmt.Errorf("bash: %w; %w", err, cerr)
		}
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return "", fmt.Errorf("bash: %w", session.ErrAborted)
		case errors.Is(err, session.ErrGuestTimeout) && time.Since(began) < time.Duration(secs)*time.Second:
			// Not our timer: a limit of the session ended the call first.
			notes = append(notes, "Command killed: "+strings.TrimSuffix(err.Error(), ": "+session.ErrGuestTimeout.Error()))
			text := bashproto.FormatResult(shown.Text, notes, 0, false, secs)
			return "", &CommandError{Text: text, TimedOut: true, ExitCode: bashproto.TimeoutExitCode}
		case errors.Is(err, session.ErrHostTimeout), errors.Is(err, session.ErrGuestTimeout):
			text := bashproto.FormatResult(shown.Text, notes, 0, true, secs)
			return "", &CommandError{Text: text, TimedOut: true, ExitCode: bashproto.TimeoutExitCode}
		case errors.Is(err, session.ErrOutputOverflow):
			return "", fmt.Errorf("bash: command output exceeds the limit; the command was killed: %w", err)
		}
		return "", fmt.Errorf("bash: %w", err)
	}
	term, terminated := filter.Terminal()
	if verr := filter.Verdict(res.ExitCode); verr != nil {
		// Without the supervisor's own records of the end nothing proves
		// the command is gone (a guest process can end the exec that ran
		// it early, as the real msb shows): what of it may still run is
		// killed, as after a failed call.
		if scoped == nil || !scoped.ProcessesEndWithCall() {
			if cerr := t.killBash(ctx, call); cerr != nil {
				return "", fmt.Errorf("%w; %w", verr, cerr)
			}
		}
		if msg := strings.TrimSpace(string(clip(res.Stderr))); msg != "" && !terminated {
			return "", fmt.Errorf("%w: %s", verr, msg)
		}
		return "", verr
	}
	text := bashproto.FormatResult(shown.Text, notes, term.Code, term.Timeout, secs)
	if term.Timeout || term.Code != 0 {
		return "", &CommandError{Text: text, ExitCode: term.Code, TimedOut: term.Timeout}
	}
	return text, nil
}

// bashCall is a new bash call. It takes the id its predecessor gave the
// guest as the next one's, whose bash the agent may have started already.
// It names the id of the call after it only when a bash call came before
// (a single call, as a one-shot CLI's first is, would leave a bash waiting
// for nothing) and no other of this toolbox is in flight (so at most one
// bash waits for a call of this toolbox).
func (t *Toolbox) bashCall() bashproto.Call {
	call := bashproto.NewCall()
	t.mu.Lock()
	defer t.mu.Unlock()
	next, before := t.bashChain.Take()
	if next != "" {
		call.ID = next
	}
	if t.bashCalls++; t.bashCalls == 1 && before {
		call.Next = bashproto.NewCall().ID
	}
	return call
}

func (t *Toolbox) bashDone(call bashproto.Call) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bashCalls--
	t.bashChain.Leave(call.Next)
}

// sessionOver reports an error after which nothing of the session can
// still run: there is nothing to kill and nothing to poison.
func sessionOver(err error) bool {
	return errors.Is(err, session.ErrGone) || errors.Is(err, session.ErrClosed) || errors.Is(err, session.ErrPoisoned)
}

// callScoped is a session where no process outlives its Shell call (the
// local backend).
type callScoped interface{ ProcessesEndWithCall() bool }

// NoteSessionLimit and NoteNetwork begin the notes of a bash result that
// carry the session's own reports: a limit of the session that fired, and
// a destination its network policy refused.
const (
	NoteSessionLimit = "Session limit: "
	NoteNetwork      = "Network: "
)

// sessionNotes are the backend's reports of session limits that fired
// ("oma-sandbox: memory limit ... reached"), which the supervisor's stderr
// never carries on its own.
func sessionNotes(stderr []byte) []string {
	var notes []string
	for line := range strings.Lines(string(clip(stderr))) {
		n, ok := strings.CutPrefix(strings.TrimSpace(line), "oma-sandbox: ")
		switch {
		case !ok:
		case strings.HasPrefix(n, "egress refused "):
			notes = append(notes, NoteNetwork+n)
		case strings.Contains(n, "limit"):
			notes = append(notes, NoteSessionLimit+n)
		}
	}
	return notes
}

// killBash asks the guest to kill everything the call started: the second
// round trip, only when the call did not see the command end. The agent's
// bash-kill builtin returns once the call's supervisor has killed
// everything.
// When the kill fails (runCleanup has sent it twice where once may be cut
// short) nothing proves the command is gone, so the session is poisoned.
func (t *Toolbox) killBash(ctx context.Context, call bashproto.Call) error {
	err := t.runCleanup(ctx, session.Command{Builtin: agentwire.BuiltinBashKill, Args: bashproto.KillArgs(call.ID)}, 10*time.Second)
	if err == nil || sessionOver(err) {
		return nil
	}
	err = fmt.Errorf("bash: could not kill the command's processes: %w", err)
	t.logger.Warn("bash cleanup failed; poisoning the session", "call", call.ID, "err", err)
	if perr := t.sess.Poison(context.WithoutCancel(ctx), err); perr != nil {
		t.logger.Warn("poison after failed bash cleanup", "err", perr)
	}
	return err
}
