package omasandbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// Outcomes of a lifecycle action, as its audit record gives them.
const (
	OutcomeOK          = "ok"
	OutcomeInvalid     = "invalid" // an option was refused; nothing was done
	OutcomeCancelled   = "cancelled"
	OutcomeHostTimeout = "host_timeout"
	OutcomeError       = "error"
)

// WithCallID returns ctx carrying a tool call's id (the model's tool-use
// id), which the call's audit record then names; see tools.WithCallID.
func WithCallID(ctx context.Context, id string) context.Context {
	return tools.WithCallID(ctx, id)
}

// outcome classifies a lifecycle action's error.
func outcome(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrInvalid):
		return OutcomeInvalid
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, session.ErrHostTimeout):
		return OutcomeHostTimeout
	case ctx.Err() != nil, errors.Is(err, session.ErrAborted):
		return OutcomeCancelled
	}
	return OutcomeError
}

// logAction writes the audit record of one lifecycle action at Info level:
// the action, the session, how long it took and its outcome. Never the
// error's text: it may quote what msb or a guest printed, and the caller
// has the error to report.
func logAction(ctx context.Context, lg *slog.Logger, action string, began time.Time, err error, attrs ...slog.Attr) {
	attrs = append([]slog.Attr{slog.String("action", action)}, attrs...)
	attrs = append(attrs, slog.Duration("duration", time.Since(began)), slog.String("outcome", outcome(ctx, err)))
	lg.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "session lifecycle", attrs...)
}

// auditAttrs name the session and its backend.
func (s *Session) auditAttrs() []slog.Attr {
	return []slog.Attr{slog.String("session", s.Name()), slog.String("backend", s.backend)}
}

// logAction audits an action on s.
func (s *Session) logAction(ctx context.Context, action string, began time.Time, err error, attrs ...slog.Attr) {
	logAction(ctx, s.opts.logger(), action, began, err, append(s.auditAttrs(), attrs...)...)
}
