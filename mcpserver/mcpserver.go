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
	"sync"
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
	// SessionIdleTimeout, for ServeHTTP, closes an HTTP session that has
	// had no request for that long (a request in progress holds it open),
	// as a client that went away without DELETE leaves its session; the
	// client's next request is answered 404 and it starts another, as the
	// protocol has it. Zero keeps every session until its DELETE or the
	// server's end.
	SessionIdleTimeout time.Duration
}

// readOnly lists the tools that change nothing in the sandbox, so that
// clients may run them without asking.
var readOnly = map[string]bool{"read": true, "ls": true, "glob": true, "grep": true}

// NewServer returns an SDK server with every tool of package tools
// registered under its own name, description and JSON Schema. Arguments
// reach tools.Call untouched: the tools layer validates them.
func NewServer(opts Options) *mcp.Server {
	return newServer(opts, nil, nil)
}

// newServer is NewServer whose tool calls are also cancelled when stop
// ends, and when ended ends their session: the SDK waits for running calls
// before it closes a connection or a session, so a shutdown or a client's
// end of its session must end them.
func newServer(opts Options, stop context.Context, ended *sessionEnds) *mcp.Server {
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
		}, toolHandler(opts, stop, ended, def.Name))
	}
	return server
}

func toolHandler(opts Options, stop context.Context, ended *sessionEnds, name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// The SDK cancels ctx on notifications/cancelled and when the client
		// goes away; tools.Call then kills the guest work.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if stop != nil {
			defer context.AfterFunc(stop, cancel)()
		}
		if ended != nil {
			defer context.AfterFunc(ended.context(req.Session), cancel)()
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

// sessionEnds holds, per HTTP session, a context that ends when its client
// ends the session (DELETE), so that the session's running calls end: the
// SDK's session Close waits for them without cancelling them, which held
// the DELETE, and left the command running, until the command ended. An
// entry lives as the SDK's session does: until its DELETE, its idle
// timeout or the server's end.
type sessionEnds struct {
	mu       sync.Mutex
	sessions map[string]sessionEnd
}

type sessionEnd struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// context returns the context of session ss, which never ends for a
// session without an id; its entry is forgotten once ss is closed.
func (e *sessionEnds) context(ss *mcp.ServerSession) context.Context {
	id := ss.ID()
	if id == "" {
		return context.Background()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.sessions[id]; !ok {
		go func() {
			_ = ss.Wait()
			e.forget(id)
		}()
	}
	return e.entry(id).ctx
}

// entry is session id's entry, made on first use; e.mu is held.
func (e *sessionEnds) entry(id string) sessionEnd {
	if e.sessions == nil {
		e.sessions = map[string]sessionEnd{}
	}
	s, ok := e.sessions[id]
	if !ok {
		s.ctx, s.cancel = context.WithCancel(context.Background())
		e.sessions[id] = s
	}
	return s
}

// forget drops session id's entry, ending its context: the session is
// closed, and no call of it runs.
func (e *sessionEnds) forget(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.sessions[id]; ok {
		s.cancel()
		delete(e.sessions, id)
	}
}

// handler ends the calls of the session a DELETE names, and any call that
// starts before the session is closed, then lets next close it, and
// forgets the session once closed (no call of it is running then).
func (e *sessionEnds) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Mcp-Session-Id")
		if r.Method != http.MethodDelete || id == "" {
			next.ServeHTTP(w, r)
			return
		}
		e.mu.Lock()
		e.entry(id).cancel()
		e.mu.Unlock()
		next.ServeHTTP(w, r)
		e.forget(id)
	})
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
