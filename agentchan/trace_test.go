package agentchan

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestRunEventsOnTheCallersSpan: a call adds two events to the span in
// its context, its id and how it ended, with the output's size and never
// its bytes; a call the host gives up on says so.
func TestRunEventsOnTheCallersSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	c, f := openFake(t)

	ctx, span := tp.Tracer("test").Start(context.Background(), "execute_tool read")
	done := goRun(ctx, c, Request{Builtin: "read", Args: []string{"secret-path"}}, Output{})
	f.next()
	f.send(`{"type":"out","id":1,"fd":1,"data":"c2VjcmV0LWJvZHk="}`, `{"type":"exit","id":1,"code":3}`)
	if r := wait(t, done); r.err != nil {
		t.Fatal(r.err)
	}
	span.End()

	cctx, cancel := context.WithCancel(context.Background())
	cctx, cspan := tp.Tracer("test").Start(cctx, "execute_tool bash")
	done = goRun(cctx, c, Request{Script: "sleep 9"}, Output{})
	f.next()
	cancel()
	if r := wait(t, done); r.err == nil {
		t.Fatal("a cancelled call succeeded")
	}
	cspan.End()

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, want := range []string{
		"agent call{oma.agent.builtin=read oma.agent.call_id=1} agent call ended{oma.agent.exit_code=3 oma.agent.outcome=exited oma.agent.output_bytes=11}",
		"agent call{oma.agent.builtin= oma.agent.call_id=2} agent call ended{oma.agent.exit_code=137 oma.agent.outcome=cancelled oma.agent.output_bytes=0}",
	} {
		var got []string
		for _, e := range spans[i].Events {
			got = append(got, e.Name+describe(e.Attributes))
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("span %s events:\n got %s\nwant %s", spans[i].Name, g, want)
		}
	}
}

func describe(attrs []attribute.KeyValue) string {
	parts := make([]string, len(attrs))
	for i, kv := range attrs {
		parts[i] = string(kv.Key) + "=" + kv.Value.Emit()
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, " ") + "}"
}
