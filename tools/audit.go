package tools

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Result classes of a tool call, as its audit record gives them.
const (
	ResultOK = "ok"
	// ResultToolError is a failure the agent caused or is told about: a
	// refused input, a guest-side failure (no such file), a command that
	// exited non-zero, output over its cap. The session stays usable.
	ResultToolError = "tool_error"
	// ResultGuestTimeout is a command the guest-side timer ended (a bash
	// command past its timeout, a search past the operation timeout).
	ResultGuestTimeout = "guest_timeout"
	// ResultHostTimeout is a call killed at a host-side deadline.
	ResultHostTimeout = "host_timeout"
	// ResultPoisoned is a call that poisoned its session, or found it
	// poisoned.
	ResultPoisoned = "poisoned"
	// ResultCancelled is a call whose context was cancelled.
	ResultCancelled = "cancelled"
	// ResultError is any other failure: of the sandbox, msb or the host
	// (the session is gone or closed, a command could not start, the guest
	// agent's channel broke).
	ResultError = "error"
)

// callIDKey carries a tool call's id in its context.
type callIDKey struct{}

// WithCallID returns ctx carrying id, the caller's id of a tool call (such
// as the model's tool-use id), for the call's audit record.
func WithCallID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, callIDKey{}, id)
}

// CallID is the id WithCallID put in ctx, or "".
func CallID(ctx context.Context) string {
	id, _ := ctx.Value(callIDKey{}).(string)
	return id
}

// ResultClass classifies the outcome of a call made with ctx on s.
func ResultClass(ctx context.Context, s session.Session, err error) string {
	cmdErr, isCmd := errors.AsType[*CommandError](err)
	switch {
	case err == nil:
		return ResultOK
	case errors.Is(err, session.ErrPoisoned), s.Poisoned():
		return ResultPoisoned
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, session.ErrHostTimeout):
		return ResultHostTimeout
	case ctx.Err() != nil, errors.Is(err, session.ErrAborted):
		return ResultCancelled
	case isCmd && cmdErr.TimedOut, errors.Is(err, session.ErrGuestTimeout):
		return ResultGuestTimeout
	case isCmd, IsGuestError(err), errors.Is(err, ErrInvalidInput), errors.Is(err, ErrUnknownTool),
		errors.Is(err, session.ErrOutputOverflow):
		return ResultToolError
	}
	return ResultError
}

// callSummary is what a call's audit record and span say about it: never
// its input or result text.
type callSummary struct {
	tool    string // a known tool's name, else "unknown"
	callID  string
	result  string // the ResultClass
	in, out int    // bytes of the input and of the text the agent gets
	failed  bool
}

// toolName is name when it is a tool's, else "unknown": the caller's
// string may be anything, even a file's contents.
func toolName(name string) string {
	if _, known := registry[name]; !known {
		return "unknown"
	}
	return name
}

// summarize classifies a call and measures its input and result.
func (t *Toolbox) summarize(ctx context.Context, name string, input []byte, text string, err error) callSummary {
	out := len(text)
	if cmdErr, ok := errors.AsType[*CommandError](err); ok {
		out = len(cmdErr.Text)
	} else if err != nil {
		out = len(err.Error())
	}
	return callSummary{tool: toolName(name), callID: CallID(ctx), result: ResultClass(ctx, t.sess, err),
		in: len(input), out: out, failed: err != nil}
}

// audit writes a call's record at Info level: which session and tool, the
// call id when there is one, how long, the result class and the sizes of
// the input and of the text the agent gets. Never the input or the text
// themselves: they hold file contents, commands and their output.
func (t *Toolbox) audit(ctx context.Context, r callSummary, began time.Time) {
	attrs := []slog.Attr{slog.String("session", t.sess.Name()), slog.String("tool", r.tool)}
	if r.callID != "" {
		attrs = append(attrs, slog.String("call_id", r.callID))
	}
	attrs = append(attrs,
		slog.Duration("duration", time.Since(began)),
		slog.String("result", r.result),
		slog.Int("bytes_in", r.in),
		slog.Int("bytes_out", r.out))
	t.logger.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "tool call", attrs...)
}
