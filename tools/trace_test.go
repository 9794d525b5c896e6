package tools_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// spanSeer is a session that remembers the span each guest command ran
// under, standing in for a backend that starts child spans.
type spanSeer struct {
	session.Session
	mu   sync.Mutex
	seen []trace.SpanContext
}

func (s *spanSeer) Shell(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	s.mu.Lock()
	s.seen = append(s.seen, trace.SpanContextFromContext(ctx))
	s.mu.Unlock()
	return s.Session.Shell(ctx, cmd, opts)
}

// TestCallSpans: one "execute_tool NAME" span per call, refused ones too,
// a child of the caller's span and the parent of the session's work, with
// the GenAI attributes, the result class and the sizes; an error status
// naming the class on failure; and nowhere the input or the output.
func TestCallSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	seer := &spanSeer{Session: sessiontest.NewHost(t)}
	tb := tools.New(seer, tools.Options{TracerProvider: tp, Backend: "local"})

	const body, command = "planted-body-5c1e", "echo planted-command-9d2b"
	ctx, root := tp.Tracer("test").Start(t.Context(), "agent turn")
	write := `{"path":"a.txt","content":"` + body + `"}`
	if _, err := tb.Call(tools.WithCallID(ctx, "toolu_01"), "write", json.RawMessage(write), nil); err != nil {
		t.Fatal(err)
	}
	if text, err := tb.Call(ctx, "read", json.RawMessage(`{"path":"a.txt"}`), nil); err != nil || !strings.Contains(text, body) {
		t.Fatalf("read: %q, %v", text, err)
	}
	if _, err := tb.Call(ctx, "bash", json.RawMessage(`{"command":"`+command+`; exit 3"}`), nil); err == nil {
		t.Fatal("exit 3 succeeded")
	}
	if _, err := tb.Call(ctx, "frob "+body, nil, nil); err == nil {
		t.Fatal("an unknown tool ran")
	}
	root.End()

	spans := rec.Ended()
	want := []struct {
		name, tool, result string
		in                 int
		callID             string
	}{
		{"execute_tool write", "write", "ok", len(write), "toolu_01"},
		{"execute_tool read", "read", "ok", len(`{"path":"a.txt"}`), ""},
		{"execute_tool bash", "bash", "tool_error", len(`{"command":"` + command + `; exit 3"}`), ""},
		{"execute_tool unknown", "unknown", "tool_error", 0, ""},
	}
	if len(spans) != len(want)+1 {
		t.Fatalf("%d spans, want %d", len(spans), len(want)+1)
	}
	for i, w := range want {
		s := spans[i]
		if s.Name() != w.name || s.SpanKind() != trace.SpanKindInternal {
			t.Errorf("span %d: %q, kind %v; want %q, internal", i, s.Name(), s.SpanKind(), w.name)
		}
		if s.Parent().SpanID() != root.SpanContext().SpanID() || s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s: parent %v, want the caller's span %v", w.name, s.Parent().SpanID(), root.SpanContext().SpanID())
		}
		attrs := attribute.NewSet(s.Attributes()...)
		wantAttrs := map[attribute.Key]attribute.Value{
			"gen_ai.operation.name": attribute.StringValue("execute_tool"),
			"gen_ai.tool.name":      attribute.StringValue(w.tool),
			"oma.session":           attribute.StringValue(seer.Name()),
			"oma.backend":           attribute.StringValue("local"),
			"oma.result":            attribute.StringValue(w.result),
			"oma.bytes_in":          attribute.IntValue(w.in),
		}
		if w.callID != "" {
			wantAttrs["gen_ai.tool.call.id"] = attribute.StringValue(w.callID)
		} else if _, ok := attrs.Value("gen_ai.tool.call.id"); ok {
			t.Errorf("%s: a call without an id has gen_ai.tool.call.id", w.name)
		}
		for k, v := range wantAttrs {
			if got, _ := attrs.Value(k); got != v {
				t.Errorf("%s: %s = %v, want %v", w.name, k, got.Emit(), v.Emit())
			}
		}
		if n, _ := attrs.Value("oma.bytes_out"); n.AsInt64() <= 0 {
			t.Errorf("%s: oma.bytes_out %v", w.name, n.Emit())
		}
		wantStatus := sdktrace.Status{Code: codes.Unset}
		if w.result != "ok" {
			wantStatus = sdktrace.Status{Code: codes.Error, Description: w.result}
			if v, _ := attrs.Value("error.type"); v.AsString() != w.result {
				t.Errorf("%s: error.type %q, want %q", w.name, v.AsString(), w.result)
			}
		}
		if s.Status() != wantStatus {
			t.Errorf("%s: status %+v, want %+v", w.name, s.Status(), wantStatus)
		}
		if len(s.Events()) != 0 {
			t.Errorf("%s: events %v", w.name, s.Events())
		}
	}

	// The session's work ran under the call's span: each guest command saw
	// one of the three calls that reached the sandbox as its span.
	calls := map[trace.SpanID]bool{}
	for _, s := range spans[:3] {
		calls[s.SpanContext().SpanID()] = true
	}
	if len(seer.seen) == 0 {
		t.Fatal("no guest command ran")
	}
	for i, sc := range seer.seen {
		if !calls[sc.SpanID()] {
			t.Errorf("guest command %d ran under span %v, not a tool call's", i, sc.SpanID())
		}
	}

	for _, s := range spans {
		if dump := spanText(s); strings.Contains(dump, body) || strings.Contains(dump, "planted-command") {
			t.Errorf("span %q holds the planted input:\n%s", s.Name(), dump)
		}
	}
}

// spanText is everything a span carries as text: name, attributes, status
// and events.
func spanText(s sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	b.WriteString(s.Name() + "\n" + s.Status().Description + "\n")
	for _, kv := range s.Attributes() {
		b.WriteString(string(kv.Key) + "=" + kv.Value.Emit() + "\n")
	}
	for _, e := range s.Events() {
		b.WriteString(e.Name + "\n")
		for _, kv := range e.Attributes {
			b.WriteString(string(kv.Key) + "=" + kv.Value.Emit() + "\n")
		}
	}
	return b.String()
}
