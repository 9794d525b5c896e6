package msb

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// scope is the instrumentation scope of msb invocations' spans and metrics.
const scope = "github.com/oma-sandbox/oma-sandbox/msb"

// InvocationsMetric counts msb invocations by subcommand and outcome.
const InvocationsMetric = "oma_sandbox.msb.invocations"

// Outcomes of an msb invocation, as its span and counter give them.
const (
	OutcomeOK          = "ok"
	OutcomeExit        = "exit"         // msb exited non-zero (a guest's status, or msb's error)
	OutcomeHostTimeout = "host_timeout" // killed at the host deadline
	OutcomeAborted     = "aborted"      // the caller cancelled
	OutcomeOverflow    = "overflow"     // killed at the output cap
	OutcomeError       = "error"        // msb did not run, or ended otherwise
)

var (
	attrSubcommand = attribute.Key("oma.msb.subcommand")
	attrOutcome    = attribute.Key("oma.msb.outcome")
	attrExitCode   = attribute.Key("process.exit.code")
)

// Observed wraps r so that each msb invocation is a span, "msb SUBCOMMAND",
// in tp (a child of the caller's), and one count in mp's
// InvocationsMetric. Neither carries the arguments: an exec's are a
// tool's script and its paths. A nil provider is a no-op one. The wrapper
// starts long-lived processes when r does (an exec --stream's span ends
// when it has started).
func Observed(r Runner, tp trace.TracerProvider, mp metric.MeterProvider) Runner {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	counter, err := mp.Meter(scope).Int64Counter(InvocationsMetric, metric.WithUnit("{invocation}"),
		metric.WithDescription("msb invocations, by subcommand and outcome"))
	if err != nil {
		counter = noop.Int64Counter{}
	}
	o := &observed{inner: r, tracer: tp.Tracer(scope), counter: counter}
	if _, ok := r.(Starter); ok {
		return &observedStarter{o}
	}
	return o
}

type observed struct {
	inner   Runner
	tracer  trace.Tracer
	counter metric.Int64Counter
}

type observedStarter struct{ *observed }

func (o *observed) Run(ctx context.Context, c Call) (*Result, error) {
	ctx, span := o.begin(ctx, c)
	res, err := o.inner.Run(ctx, c)
	code := -1
	if res != nil {
		code = res.ExitCode
	}
	o.end(ctx, span, c, code, err)
	return res, err
}

func (o *observedStarter) Start(ctx context.Context, c Call) (*Process, error) {
	ctx, span := o.begin(ctx, c)
	p, err := o.inner.(Starter).Start(ctx, c)
	o.end(ctx, span, c, -1, err)
	return p, err
}

func (o *observed) begin(ctx context.Context, c Call) (context.Context, trace.Span) {
	return o.tracer.Start(ctx, "msb "+subcommand(c.Args), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrSubcommand.String(subcommand(c.Args))))
}

func (o *observed) end(ctx context.Context, span trace.Span, c Call, code int, err error) {
	outcome := invocationOutcome(err)
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(outcome))
		if code >= 0 {
			span.SetAttributes(attrExitCode.Int(code))
		}
		if err != nil {
			span.SetStatus(codes.Error, outcome)
		}
	}
	span.End()
	o.counter.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attrSubcommand.String(subcommand(c.Args)), attrOutcome.String(outcome)))
}

// invocationOutcome classifies a Runner's error.
func invocationOutcome(err error) string {
	var exitErr *ExitError
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrHostTimeout):
		return OutcomeHostTimeout
	case errors.Is(err, ErrAborted):
		return OutcomeAborted
	case errors.Is(err, ErrOutputOverflow):
		return OutcomeOverflow
	case errors.As(err, &exitErr):
		return OutcomeExit
	}
	return OutcomeError
}
