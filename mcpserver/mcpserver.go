// Package mcpserver serves a session's agent tools over the Model Context
// Protocol with the official Go SDK: tools/list returns the definitions and
// JSON Schemas of package tools, tools/call goes through tools.Call. The
// session's lifecycle belongs to the caller; this package maps the protocol.
package mcpserver

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// Options configure a server.
type Options struct {
	// Toolbox runs every tool call; required.
	Toolbox *tools.Toolbox
	// Name and Version identify the server to clients; "" means
	// "oma-sandbox" and "(devel)".
	Name, Version string
	// Logger receives the SDK's log and a warning per tool call that failed
	// on the sandbox's or the host's side; nil discards them. The audit
	// record of every call is the Toolbox's (tools.Options.Logger).
	Logger *slog.Logger
	// Metrics, when set, is served at MetricsPath by ServeHTTP, behind the
	// same Host, Origin and token checks as the protocol (a Prometheus
	// handler, say); stdio has no such path.
	Metrics http.Handler
}

// readOnly lists the tools that change nothing in the sandbox, so that
// clients may run them without asking.
var readOnly = map[string]bool{"read": true, "ls": true, "glob": true, "grep": true}

// NewServer returns an SDK server with every tool of package tools
// registered under its own name, description and JSON Schema. Arguments
// reach tools.Call untouched: the tools layer validates them.
func NewServer(opts Options) *mcp.Server {
	return newServer(opts, nil)
}

// newServer is NewServer whose tool calls are also cancelled when stop
// ends: the SDK waits for running calls before it closes a connection, so a
// shutdown must end them.
func newServer(opts Options, stop context.Context) *mcp.Server {
	if opts.Toolbox == nil {
		panic("mcpserver: Options.Toolbox is nil")
	}
	if opts.Name == "" {
		opts.Name = "oma-sandbox"
	}
	if opts.Version == "" {
		opts.Version = "(devel)"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: opts.Name, Version: opts.Version}, &mcp.ServerOptions{
		Logger: opts.Logger,
		// Tools only: no client logging, and the tool list never changes.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	for _, def := range tools.Definitions() {
		server.AddTool(&mcp.Tool{
			Name:        def.Name,
			Description: def.Description,
			InputSchema: def.InputSchema,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: readOnly[def.Name]},
		}, toolHandler(opts, stop, def.Name))
	}
	return server
}

func toolHandler(opts Options, stop context.Context, name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// The SDK cancels ctx on notifications/cancelled and when the client
		// goes away; tools.Call then kills the guest work.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if stop != nil {
			defer context.AfterFunc(stop, cancel)()
		}
		var progress tools.Progress
		if token := req.Params.GetProgressToken(); token != nil {
			p := newProgressSender(ctx, req.Session, token)
			defer p.close()
			progress = p.add
		}
		ctx = extractTrace(ctx, req.Params.GetMeta())
		start := time.Now()
		text, err := opts.Toolbox.Call(ctx, name, req.Params.Arguments, progress)
		warnHostFailure(opts.Logger, name, time.Since(start), err)
		if err != nil {
			return textResult(errorText(err), true), nil
		}
		return textResult(text, false), nil
	}
}

// extractTrace returns ctx continuing the caller's trace when the request's
// _meta carries a W3C traceparent (and tracestate), as MCP clients put it:
// the call's span is then a child of the caller's. Always the W3C
// propagator, not the global one: _meta's keys are the protocol's.
func extractTrace(ctx context.Context, meta map[string]any) context.Context {
	carrier := propagation.MapCarrier{}
	for _, key := range []string{"traceparent", "tracestate"} {
		if v, ok := meta[key].(string); ok {
			carrier[key] = v
		}
	}
	if len(carrier) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// errorText is what the agent sees for a failed call: a failed command's
// output and note, or the tool's own message.
func errorText(err error) string {
	if cmdErr, ok := errors.AsType[*tools.CommandError](err); ok {
		return cmdErr.Text
	}
	return err.Error()
}

func textResult(text string, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: isError}
}

// warnHostFailure logs an error that is neither the agent's (input,
// command, guest) nor an abort: a sandbox or host failure an operator may
// need to see. The agent's errors are left out: they quote commands'
// output and guest text.
func warnHostFailure(logger *slog.Logger, name string, d time.Duration, err error) {
	if err != nil && !agentError(err) && !errors.Is(err, session.ErrAborted) {
		logger.Warn("tool call failed", "tool", name, "duration", d, "err", err)
	}
}

func agentError(err error) bool {
	_, cmd := errors.AsType[*tools.CommandError](err)
	return cmd || tools.IsGuestError(err) || errors.Is(err, tools.ErrInvalidInput)
}
