package omasandbox_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// TestTraces runs create → write → read → bash → pause → resume → fork →
// close on both backends with an in-memory exporter, and reads the spans
// back: one per action and per call, each a child of the caller's span,
// with their attributes, and nowhere in them a planted file body, a planted
// secret (which the command prints in full) or the command's text.
func TestTraces(t *testing.T) {
	for _, backend := range []string{"local", "msb"} {
		t.Run(backend, func(t *testing.T) { testTraces(t, backend) })
	}
}

func testTraces(t *testing.T, backend string) {
	secret, body := "planted-secret-"+rand.Text(), "planted-body-"+rand.Text()
	encoded := base64.StdEncoding.EncodeToString([]byte(secret)) // the command's text holds this
	t.Setenv("OMA_TRACE_SECRET", secret)
	allow, err := egress.ParseTarget("127.0.0.1:9")
	require.NoError(t, err)
	sec, err := egress.ParseSecret("OMA_TRACE_SECRET@127.0.0.1")
	require.NoError(t, err)

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	o := omasandbox.Options{
		Backend: backend, WorkspaceID: "w1", StateDir: t.TempDir(), TracerProvider: tp,
		Network: omasandbox.NetworkPolicy{Allow: []egress.Target{allow}, Secrets: []egress.Secret{sec}},
	}
	if backend == "msb" {
		o.Msb = fakemsbtest.New(t).Bin
	}
	ctx, root := tp.Tracer("test").Start(t.Context(), "agent run")
	s, err := omasandbox.Open(ctx, o)
	require.NoError(t, err)
	defer func() { _ = s.Close(context.Background()) }()
	write := map[string]any{"path": "trace.txt", "content": body}
	bash := map[string]any{"command": `echo "$OMA_TRACE_SECRET"; echo ` + encoded + ` | base64 -d; echo out > ` + s.Paths().Outputs + `/o.txt`}
	inputs := map[string][]byte{}
	for _, c := range []struct {
		tool  string
		input map[string]any
		shows string // what the result must carry, so the spans' silence means something
	}{
		{"write", write, ""},
		{"read", map[string]any{"path": "trace.txt"}, body},
		{"bash", bash, secret},
	} {
		raw, err := json.Marshal(c.input)
		require.NoError(t, err)
		inputs[c.tool] = raw
		text, err := s.Call(omasandbox.WithCallID(ctx, "call-"+c.tool), c.tool, raw)
		require.NoError(t, err, c.tool)
		require.Contains(t, text, c.shows, c.tool)
	}
	require.NoError(t, s.Upload(ctx, omasandbox.UploadFile{Path: "up.txt", Content: []byte(body)}))
	collected, err := s.CollectOutputs(ctx, t.TempDir())
	require.NoError(t, err)
	require.Len(t, collected.Files, 1)
	require.NoError(t, s.Pause(ctx))
	require.NoError(t, s.Resume(ctx))
	f, err := s.Fork(ctx, "")
	require.NoError(t, err)
	require.NoError(t, f.Close(ctx))
	require.NoError(t, s.Close(ctx))
	root.End()

	all := exp.GetSpans() // in the order they ended
	// msb's invocations are spans of their own, each the child of the
	// action or call that made it.
	var spans, invocations tracetest.SpanStubs
	for _, sp := range all {
		if strings.HasPrefix(sp.Name, "msb ") {
			invocations = append(invocations, sp)
		} else {
			spans = append(spans, sp)
		}
	}
	require.NotEmpty(t, spans)
	rootSpan := spans[len(spans)-1]
	require.Equal(t, "agent run", rootSpan.Name)
	want := []struct{ name, session string }{
		{"session create", s.Name()}, {"execute_tool write", s.Name()}, {"execute_tool read", s.Name()},
		{"execute_tool bash", s.Name()}, {"session upload", s.Name()}, {"session collect", s.Name()},
		{"session pause", s.Name()}, {"session resume", s.Name()},
		{"session fork", s.Name()}, {"session close", f.Name()}, {"session close", s.Name()},
	}
	var names []string
	for _, sp := range spans {
		names = append(names, sp.Name)
	}
	require.Len(t, names, len(want)+1, "spans: %q", names)
	for i, w := range want {
		sp := spans[i]
		require.Equal(t, w.name, sp.Name, "span %d", i)
		assert.Equal(t, rootSpan.SpanContext.SpanID(), sp.Parent.SpanID(), "%s: the caller's span is its parent", sp.Name)
		assert.Equal(t, rootSpan.SpanContext.TraceID(), sp.SpanContext.TraceID(), sp.Name)
		assert.Equal(t, trace.SpanKindInternal, sp.SpanKind, sp.Name)
		assert.Equal(t, codes.Unset, sp.Status.Code, sp.Name)
		// A call on the guest agent's channel adds two events to the span
		// it runs under: a tool call's, an upload's or a collection's. On
		// local that is a call to the session's resident sandbox, which
		// only host root starts and which runs no upload (root's calls
		// run sandboxes of their own).
		var events []string
		for _, e := range sp.Events {
			events = append(events, e.Name)
		}
		onChannel := strings.HasPrefix(sp.Name, "execute_tool ") || sp.Name == "session collect" ||
			sp.Name == "session upload" && backend == "msb"
		if onChannel && (backend == "msb" || os.Geteuid() == 0) {
			require.NotEmpty(t, events, sp.Name)
			for i, e := range events {
				assert.Equal(t, []string{"agent call", "agent call ended"}[i%2], e, sp.Name)
			}
		} else {
			assert.Empty(t, events, sp.Name)
		}
		attrs := attribute.NewSet(sp.Attributes...)
		str := func(k attribute.Key) string { v, _ := attrs.Value(k); return v.AsString() }
		assert.Equal(t, backend, str("oma.backend"), sp.Name)
		assert.Equal(t, w.session, str("oma.session"), sp.Name)
		if tool, ok := strings.CutPrefix(sp.Name, "execute_tool "); ok {
			assert.Equal(t, "execute_tool", str("gen_ai.operation.name"))
			assert.Equal(t, tool, str("gen_ai.tool.name"))
			assert.Equal(t, "call-"+tool, str("gen_ai.tool.call.id"))
			assert.Equal(t, "ok", str("oma.result"), sp.Name)
			in, _ := attrs.Value("oma.bytes_in")
			assert.Equal(t, int64(len(inputs[tool])), in.AsInt64(), sp.Name)
			out, _ := attrs.Value("oma.bytes_out")
			assert.Positive(t, out.AsInt64(), sp.Name)
			continue
		}
		action, _ := strings.CutPrefix(sp.Name, "session ")
		assert.Equal(t, action, str("oma.action"), sp.Name)
		assert.Equal(t, "ok", str("oma.outcome"), sp.Name)
		if action == "fork" {
			assert.Equal(t, f.Name(), str("oma.fork"))
		}
		if action == "upload" || action == "collect" {
			n, _ := attrs.Value("oma.bytes")
			files, _ := attrs.Value("oma.files")
			want := map[string]int64{"upload": int64(len(body)), "collect": int64(len("out\n"))}[action]
			assert.Equal(t, want, n.AsInt64(), sp.Name)
			assert.Equal(t, int64(1), files.AsInt64(), sp.Name)
		}
	}

	byID := map[trace.SpanID]string{}
	for _, sp := range spans {
		byID[sp.SpanContext.SpanID()] = sp.Name
	}
	parents := map[string]bool{}
	for _, sp := range invocations {
		assert.Equal(t, trace.SpanKindClient, sp.SpanKind, sp.Name)
		parent := byID[sp.Parent.SpanID()]
		assert.NotEmpty(t, parent, "%s: its parent is an action's or a call's span", sp.Name)
		parents[sp.Name+" in "+parent] = true
	}
	if backend == "msb" {
		// The first call opens the guest agent's channel (inspect, then
		// exec --stream); the later calls are frames on it.
		for _, want := range []string{"msb create in session create", "msb inspect in execute_tool write", "msb exec in execute_tool write",
			"msb stop in session pause", "msb remove in session close"} {
			assert.True(t, parents[want], "no span %q among %v", want, parents)
		}
	} else {
		assert.Empty(t, invocations, "a local session runs no msb")
	}

	for _, sp := range all {
		dump := []string{sp.Name, sp.Status.Description}
		for _, kv := range sp.Attributes {
			dump = append(dump, kv.Value.Emit())
		}
		for _, e := range sp.Events {
			dump = append(dump, e.Name)
			for _, kv := range e.Attributes {
				dump = append(dump, kv.Value.Emit())
			}
		}
		for what, planted := range map[string]string{"secret": secret, "file body": body, "command text": encoded} {
			assert.False(t, slices.ContainsFunc(dump, func(s string) bool { return strings.Contains(s, planted) }),
				"span %q holds the planted %s", sp.Name, what)
		}
	}
}

// TestTracesRefused: a refused create or attach still gets its span, with
// an error status that names the outcome, not the error's text.
func TestTracesRefused(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	_, err := omasandbox.Open(t.Context(), omasandbox.Options{Backend: "cloud", TracerProvider: tp})
	require.Error(t, err)
	_, err = omasandbox.Attach(t.Context(), "not-a-session", omasandbox.Options{TracerProvider: tp})
	require.Error(t, err)

	spans := rec.Ended()
	require.Len(t, spans, 2)
	for i, want := range []struct{ name, key, value string }{
		{"session create", "oma.backend", "cloud"},
		{"session attach", "oma.session", "not-a-session"},
	} {
		sp := spans[i]
		assert.Equal(t, want.name, sp.Name())
		assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: "invalid"}, sp.Status(), want.name)
		attrs := attribute.NewSet(sp.Attributes()...)
		v, _ := attrs.Value(attribute.Key(want.key))
		assert.Equal(t, want.value, v.AsString(), want.name)
		v, _ = attrs.Value("oma.outcome")
		assert.Equal(t, "invalid", v.AsString(), want.name)
	}
	attach := attribute.NewSet(spans[1].Attributes()...)
	_, hasBackend := attach.Value("oma.backend")
	assert.False(t, hasBackend, "a name of no backend gets no oma.backend")
}
