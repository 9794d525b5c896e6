package tools

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the tool calls' spans.
const tracerName = "github.com/oma-sandbox/oma-sandbox/tools"

// The attribute keys of a tool call's span: the OpenTelemetry GenAI
// conventions' for tool execution, and this project's own.
const (
	attrOperationName = attribute.Key("gen_ai.operation.name")
	attrToolName      = attribute.Key("gen_ai.tool.name")
	attrToolCallID    = attribute.Key("gen_ai.tool.call.id")
	attrErrorType     = attribute.Key("error.type")
	attrBackend       = attribute.Key("oma.backend")
	attrSession       = attribute.Key("oma.session")
	attrResult        = attribute.Key("oma.result")
	attrBytesIn       = attribute.Key("oma.bytes_in")
	attrBytesOut      = attribute.Key("oma.bytes_out")
)

// startSpan starts a call's span, "execute_tool NAME", with what is known
// before the call runs, so that a sampler sees it.
func (t *Toolbox) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	tool := toolName(name)
	attrs := []attribute.KeyValue{
		attrOperationName.String("execute_tool"),
		attrToolName.String(tool),
		attrSession.String(t.sess.Name()),
	}
	if id := CallID(ctx); id != "" {
		attrs = append(attrs, attrToolCallID.String(id))
	}
	if t.backend != "" {
		attrs = append(attrs, attrBackend.String(t.backend))
	}
	return t.tracer.Start(ctx, "execute_tool "+tool, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// endSpan ends a call's span with its result class and sizes. A failure's
// status carries the class, never the error's text, which may quote the
// file or the command's output; no error is recorded as an event for the
// same reason.
func endSpan(span trace.Span, r callSummary) {
	if span.IsRecording() {
		span.SetAttributes(attrResult.String(r.result), attrBytesIn.Int(r.in), attrBytesOut.Int(r.out))
		if r.failed {
			span.SetAttributes(attrErrorType.String(r.result))
			span.SetStatus(codes.Error, r.result)
		}
	}
	span.End()
}
