package omasandbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

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

// tracerName is the instrumentation scope of the session actions' spans.
const tracerName = "github.com/oma-sandbox/oma-sandbox"

// attrAction and attrOutcome are a session action's span attributes beside
// its audit record's (oma.session, oma.backend, oma.fork).
const (
	attrAction  = attribute.Key("oma.action")
	attrOutcome = attribute.Key("oma.outcome")
)

// action is one lifecycle action under way; its audit record is written
// and its span ended by end.
type action struct {
	began time.Time
	name  string
	lg    *slog.Logger
	span  trace.Span
}

// beginAction starts the span of a lifecycle action, "session ACTION". The
// action runs under the returned context, so what it does nests in it.
func beginAction(ctx context.Context, o Options, name string) (context.Context, *action) {
	began := time.Now()
	ctx, span := o.tracerProvider().Tracer(tracerName).Start(ctx, "session "+name,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrAction.String(name)))
	return ctx, &action{began: began, name: name, lg: o.logger(), span: span}
}

// end writes the action's audit record at Info level: the action, the
// session, how long it took and its outcome. Its span gets the same
// attributes, and on failure an error status that says the outcome. Never
// the error's text: it may quote what msb or a guest printed, and the
// caller has the error to report.
func (a *action) end(ctx context.Context, err error, attrs ...slog.Attr) {
	out := outcome(ctx, err)
	if a.span.IsRecording() {
		for _, at := range attrs {
			if v := at.Value.String(); v != "" { // a name of no backend has none
				a.span.SetAttributes(attribute.String("oma."+at.Key, v))
			}
		}
		a.span.SetAttributes(attrOutcome.String(out))
		if err != nil {
			a.span.SetStatus(codes.Error, out)
		}
	}
	a.span.End()
	attrs = append([]slog.Attr{slog.String("action", a.name)}, attrs...)
	attrs = append(attrs, slog.Duration("duration", time.Since(a.began)), slog.String("outcome", out))
	a.lg.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "session lifecycle", attrs...)
}

// auditAttrs name the session and its backend.
func (s *Session) auditAttrs() []slog.Attr {
	return []slog.Attr{slog.String("session", s.Name()), slog.String("backend", s.backend)}
}

// beginAction starts an action on s.
func (s *Session) beginAction(ctx context.Context, name string) (context.Context, *action) {
	return beginAction(ctx, s.opts, name)
}

// endAction ends an action on s, naming s.
func (s *Session) endAction(ctx context.Context, a *action, err error, attrs ...slog.Attr) {
	a.end(ctx, err, append(s.auditAttrs(), attrs...)...)
}
