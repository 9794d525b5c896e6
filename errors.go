package omasandbox

import (
	"fmt"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// Errors a caller branches on with errors.Is. They are the sentinels of the
// packages underneath, so an error matches whichever layer produced it.
var (
	// ErrInvalid is a refused Open or Attach option; nothing was created.
	ErrInvalid = session.ErrInvalid
	// ErrNotFound is a session that does not exist (Attach), or one whose
	// sandbox was removed (ErrGone also matches it).
	ErrNotFound = session.ErrNotFound
	// ErrGone is a session whose sandbox was removed outside this process
	// (session rm, the reaper) while in use: start a new one.
	ErrGone = session.ErrGone
	// ErrClosed is a call on a closed session.
	ErrClosed = session.ErrClosed
	// ErrPoisoned is a session whose guest state became unknown (a call
	// without its readiness marker, a failed cleanup): its files are kept,
	// but it runs nothing more. Close it.
	ErrPoisoned = session.ErrPoisoned
	// ErrGuestTimeout is a command the guest-side timer ended (a bash
	// command that ran past its Timeout, a glob past the operation timeout).
	ErrGuestTimeout = session.ErrGuestTimeout
	// ErrHostTimeout is a call killed at the host-side deadline (ctx).
	ErrHostTimeout = session.ErrHostTimeout
	// ErrAborted is a call killed because ctx was cancelled.
	ErrAborted = session.ErrAborted
	// ErrChannelBroken is an msb call whose guest agent channel died under
	// it (the agent, its msb exec or the sandbox ended): its outcome is
	// unknown. The session reopens the channel once, then makes one msb
	// exec per call.
	ErrChannelBroken = session.ErrChannelBroken
	// ErrCannotStart is a command that could not start in the sandbox.
	ErrCannotStart = session.ErrCannotStart
	// ErrOutputOverflow is a command killed at its output cap.
	ErrOutputOverflow = session.ErrOutputOverflow

	// ErrInvalidInput is a refused tool input (an *InputError, or an
	// *EditError whose old text does not fit); nothing changed.
	ErrInvalidInput = tools.ErrInvalidInput
	// ErrOutsideWorkspace is a tool path that leaves the roots the tool
	// may reach (the workspace, uploads, skills); it also matches
	// ErrInvalidInput.
	ErrOutsideWorkspace = tools.ErrPathEscape
	// ErrUnknownTool is a Call of a tool that does not exist.
	ErrUnknownTool = tools.ErrUnknownTool

	// ErrIntegrity is an upload whose bytes are not what was declared.
	ErrIntegrity = transfer.ErrIntegrity
	// ErrUnsafePath is an upload or output path that is not a plain path
	// below its root.
	ErrUnsafePath = transfer.ErrPath
)

// Error types a caller reads with errors.As.
type (
	// InputError is a refused tool input: which tool, and why.
	InputError = tools.InputError
	// EditError is an edit whose old text is missing, repeated or
	// overlapping; the file was not changed.
	EditError = tools.EditError
	// CommandError is a bash command that exited non-zero or timed out, as
	// Call reports it; its Text is the tool result.
	CommandError = tools.CommandError
	// GuestError is a tool failure the guest reported (a file not found,
	// a directory where a file was expected); its text names the path.
	GuestError = tools.GuestError
)

// invalidError is a refused option whose text is the reason alone.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}
