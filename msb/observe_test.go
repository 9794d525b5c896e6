package msb

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// answering is a Runner that gives each call the outcome its first
// argument names; it cannot start long-lived processes.
type answering struct{}

func (answering) Run(_ context.Context, c Call) (*Result, error) {
	switch c.Args[len(c.Args)-1] {
	case "exit":
		return &Result{ExitCode: 3}, &ExitError{Args: c.Args, ExitCode: 3}
	case "timeout":
		return nil, fmt.Errorf("%w: after 1s", ErrHostTimeout)
	case "abort":
		return nil, ErrAborted
	case "overflow":
		return nil, &OverflowError{}
	case "broken":
		return nil, errors.New("fork/exec msb: no such file")
	}
	return &Result{}, nil
}

// TestObserved: every invocation is a span named by its subcommand, with
// its outcome and exit code and never its arguments, and one count by
// subcommand and outcome.
func TestObserved(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	r := Observed(answering{}, tp, mp)
	_, isStarter := r.(Starter)
	assert.False(t, isStarter, "a runner that cannot start processes does not become one")

	ctx := context.Background()
	for _, last := range []string{"ok", "exit", "timeout", "abort", "overflow", "broken"} {
		_, _ = r.Run(ctx, Call{Args: []string{"exec", "NAME", "--", "secret-script", last}})
	}
	_, _ = r.Run(ctx, Call{Args: []string{"volume", "remove", "ok"}})

	var got []string
	for _, sp := range spans.GetSpans() {
		attrs := attribute.NewSet(sp.Attributes...)
		outcome, _ := attrs.Value("oma.msb.outcome")
		code, hasCode := attrs.Value("process.exit.code")
		got = append(got, fmt.Sprintf("%s %s %v %d", sp.Name, outcome.AsString(), hasCode, code.AsInt64()))
		for _, kv := range sp.Attributes {
			assert.NotContains(t, kv.Value.Emit(), "secret-script", "a span carries the arguments")
		}
	}
	assert.Equal(t, []string{
		"msb exec ok true 0", "msb exec exit true 3", "msb exec host_timeout false 0", "msb exec aborted false 0",
		"msb exec overflow false 0", "msb exec error false 0", "msb volume remove ok true 0",
	}, got)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			require.Equal(t, InvocationsMetric, m.Name)
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				sub, _ := dp.Attributes.Value("oma.msb.subcommand")
				out, _ := dp.Attributes.Value("oma.msb.outcome")
				counts[sub.AsString()+" "+out.AsString()] = dp.Value
			}
		}
	}
	assert.Equal(t, map[string]int64{"exec ok": 1, "exec exit": 1, "exec host_timeout": 1, "exec aborted": 1,
		"exec overflow": 1, "exec error": 1, "volume remove ok": 1}, counts)

	assert.Implements(t, (*Starter)(nil), Observed(&CLI{}, nil, nil), "a CLI still starts processes once observed")
}
