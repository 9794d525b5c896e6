package mcpserver

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// TestTraceparentInMeta: a tools/call whose _meta carries a W3C
// traceparent and tracestate gets a tool span in the caller's trace, a
// child of the caller's span; a call without one starts a trace of its
// own, and a malformed one is ignored.
func TestTraceparentInMeta(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tb := tools.New(sessiontest.NewHost(t), tools.Options{TracerProvider: tp})
	c := connect(t, NewServer(Options{Toolbox: tb}))

	const (
		traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		parentID = "00f067aa0ba902b7"
	)
	metas := []mcp.Meta{
		{"traceparent": "00-" + traceID + "-" + parentID + "-01", "tracestate": "vendor=opaque"},
		nil,
		{"traceparent": "not-a-traceparent"},
	}
	for _, meta := range metas {
		res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Meta: meta, Name: "ls", Arguments: obj{}})
		require.NoError(t, err)
		require.False(t, res.IsError)
	}

	spans := rec.Ended()
	require.Len(t, spans, len(metas))
	for _, s := range spans {
		assert.Equal(t, "execute_tool ls", s.Name())
	}
	continued := spans[0]
	assert.Equal(t, traceID, continued.SpanContext().TraceID().String())
	assert.Equal(t, parentID, continued.Parent().SpanID().String())
	assert.True(t, continued.Parent().IsRemote())
	assert.Equal(t, "vendor=opaque", continued.SpanContext().TraceState().String())
	for _, s := range spans[1:] {
		assert.False(t, s.Parent().IsValid(), "a call without a valid traceparent starts a trace")
		assert.NotEqual(t, traceID, s.SpanContext().TraceID().String())
	}
	assert.True(t, continued.SpanContext().IsSampled())
}
