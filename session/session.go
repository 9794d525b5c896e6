// Package session defines the Session seam between the agent tools and the
// sandbox backends (session/microvm on msb, session/local on the host's OS
// sandbox): the interface, the errors both report, and the names and labels
// of msb resources the reaper recognises.
package session

import (
	"context"
	"errors"
	"io"
	"time"
)

// Timing shared by every backend.
const (
	// DefaultOperationTimeout bounds every guest command that names no
	// timeout of its own.
	DefaultOperationTimeout = 10 * time.Second
	// HostGrace is added to a guest timeout to form the host deadline, so the
	// guest timer fires first and its answer is the one reported.
	HostGrace = 2 * time.Second
)

// MaxForkCopyBytes bounds the file data a fork copies from its source's
// workspace. The copy keeps hard links and holes, so it writes what the
// guest's files hold, not what their names and sizes claim; past this it
// fails and the fork is removed.
const MaxForkCopyBytes = 16 << 30

// Errors shared by every backend. Callers test them with errors.Is. An
// error of ErrHostTimeout or ErrAborted also matches the context's cause
// (context.DeadlineExceeded, context.Canceled, or what the caller gave).
var (
	ErrClosed         = errors.New("session is closed")
	ErrPoisoned       = errors.New("session is poisoned")
	ErrGuestTimeout   = errors.New("guest command timed out")      // the in-guest timer fired
	ErrHostTimeout    = errors.New("host deadline exceeded")       // ctx deadline; the call was killed
	ErrAborted        = errors.New("operation aborted")            // ctx canceled; the call was killed
	ErrOutputOverflow = errors.New("command output exceeds limit") // the call was killed at its cap
	ErrCannotStart    = errors.New("command could not start")
	// ErrChannelBroken reports that the msb backend's guest-agent channel
	// died under a call (the agent or its msb exec ended, the agent broke
	// the protocol, the sandbox stopped): the call's outcome is unknown.
	// The session reopens the channel once, then uses one msb exec per call
	// (each running the agent's builtin).
	ErrChannelBroken = errors.New("guest agent channel broken")
	// ErrNoAgent reports that a session has no guest agent, the program
	// that runs every tool call: a build that embeds none and cannot serve
	// as its own, or a sandbox made without one.
	ErrNoAgent  = errors.New("no guest agent")
	ErrNotFound = errors.New("sandbox not found")
	ErrInvalid  = errors.New("invalid session option")
	// ErrGone reports that a session's sandbox disappeared while the
	// session was in use (session rm or the reaper, from another process).
	// Nothing is left to poison or recover; it also matches ErrNotFound.
	ErrGone error = goneError{}
)

type goneError struct{}

func (goneError) Error() string {
	return "session is gone: its sandbox was removed outside this process (session rm or the reaper); start a new session"
}

func (goneError) Is(target error) bool { return target == ErrNotFound }

// Command is a bash script run as `/bin/bash -c SCRIPT bash ARGS...`, so the
// script reads its arguments as "$1".."$N" and nothing is spliced into it.
type Command struct {
	Script string
	Args   []string
	// Builtin, when set, names a builtin of the guest agent, which every
	// backend runs with Args and stdin in place of a script (Script is
	// then empty): every tool's guest work is one (docs/guest-agent.md).
	Builtin string
}

// ShellOptions tune one Shell call.
type ShellOptions struct {
	// Stdin is read to EOF; nil means empty.
	Stdin io.Reader
	// Stdout and Stderr, when set, receive output chunks as they arrive, and
	// that stream is not kept in Result.
	Stdout, Stderr func([]byte)
	// User runs the command as this user ("0" for root); "" is the image's default.
	User string
	// Workdir defaults to the workspace.
	Workdir string
	// GuestTimeout arms the guest-side timer; 0 leaves it off. The host-side
	// deadline is the caller's ctx.
	GuestTimeout time.Duration
	// MaxOutput caps stdout+stderr; 0 means the backend's default (16 MiB).
	MaxOutput int64
}

// Result of a Shell call. A non-zero ExitCode is not an error: Shell's error
// reports only what kept the command from running to its own end. A command
// killed by a signal the host did not send reports 255 where msb or the
// guest agent ran it (msb, a local resident sandbox), as msb does, and
// 128 + the signal in a local sandbox of its own, as a shell would.
type Result struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// Paths are where a session's well-known directories appear to its commands.
type Paths struct {
	Workspace string // persistent; cwd of every tool
	Uploads   string // caller files, read-only to the agent
	Outputs   string // files the agent leaves for the caller
	Skills    string // skill files
}

// Session is one sandbox. Every tool, upload and output operation is written
// once against it.
type Session interface {
	// Name identifies the session for Attach across processes.
	Name() string
	Shell(ctx context.Context, cmd Command, opts ShellOptions) (*Result, error)
	// CopyIn copies a host file or directory to an absolute guest path.
	CopyIn(ctx context.Context, hostPath, guestPath string) error
	Paths() Paths
	// Poison tells the backend that a call left the guest's state unknown
	// (no readiness marker, a failed cleanup). The backend ends whatever
	// may still run and, unless it can prove that nothing is left running,
	// marks the session unusable: later calls fail with ErrPoisoned. Poison
	// never removes the agent's files: only Close (and the reaper) remove a
	// workspace. It returns nil when the session stays usable, else an
	// error wrapping ErrPoisoned that says where the files are kept and how
	// to remove them, joined with any failure to end what ran.
	Poison(ctx context.Context, cause error) error
	Poisoned() bool
	// Close removes the sandbox, then its volume. Idempotent.
	Close(ctx context.Context) error
}
