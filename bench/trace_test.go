package bench

import (
	"context"
	"os/exec"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// BenchmarkTracing is what a tool call's span costs, side by side on one
// local session: ours with no TracerProvider (the global one, a no-op as
// no program installed one: what every user who wants no traces gets) and
// "traced", with an SDK provider recording every span to an in-memory
// exporter (the SDK's whole cost but the network). Rows read and ls are
// the lightest calls, where a fixed cost per span shows most.
func BenchmarkTracing(b *testing.B) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skipf("the local backend needs bwrap: %v", err)
	}
	ctx := context.Background()
	sess, err := local.Create(ctx, local.Options{StateDir: b.TempDir(), WorkspaceID: "bench", SessionID: "tracing"})
	if err != nil {
		b.Skipf("the local backend cannot run here: %v", err)
	}
	b.Cleanup(func() { _ = sess.Close(ctx) })
	mustShell(b, sess, fixtureScript)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	b.Cleanup(func() { _ = tp.Shutdown(ctx) })
	untraced := tools.New(sess, tools.Options{Backend: "local"})
	traced := tools.New(sess, tools.Options{Backend: "local", TracerProvider: tp})
	for _, row := range []struct {
		tool  string
		input map[string]any
	}{
		{"read", map[string]any{"path": "bench/read.txt"}},
		{"ls", map[string]any{"path": "bench/sub"}},
	} {
		b.Run("tool="+row.tool, func(b *testing.B) {
			s := newSideBySide(b)
			for b.Loop() {
				s.round(
					variant{"ours", func() { call(b, untraced, row.tool, row.input) }},
					variant{"traced", func() {
						call(b, traced, row.tool, row.input)
						if n := len(exp.GetSpans()); n != 1 {
							b.Fatalf("the traced call exported %d spans, want 1", n)
						}
						exp.Reset() // flat memory over any -benchtime
					}},
				)
			}
			s.report()
		})
	}
}
