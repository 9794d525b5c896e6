package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrNotLoopback is returned by ListenHTTP for an address other than a
// loopback one.
var ErrNotLoopback = errors.New("the MCP HTTP endpoint listens on loopback addresses only (127.0.0.1, ::1 or localhost): " +
	"its tools run commands and plain HTTP would carry its token in the clear; reach it from another machine through a tunnel such as ssh -L")

// HTTPPath is where ServeHTTP serves the streamable HTTP endpoint.
const HTTPPath = "/mcp"

// MetricsPath is where ServeHTTP serves Options.Metrics.
const MetricsPath = "/metrics"

// httpShutdownTimeout bounds how long ServeHTTP waits for open HTTP
// connections once ctx ends; the tool calls on them are already cancelled.
const httpShutdownTimeout = 5 * time.Second

// ServeStdio serves one client on os.Stdin and os.Stdout. It returns nil
// when the client disconnects (its stdin ends, or a write finds stdout
// closed) or ctx ends. Either cancels the tool calls still running, which
// kills their guest work; when ctx ends, the connection closes without
// their results.
// A line that is not a JSON-RPC message, or is longer than MaxMessageBytes,
// is answered with an error and the next line is served.
func ServeStdio(ctx context.Context, opts Options) error {
	// A client that closed its end of stdout is gone. Go kills a process
	// whose write to stdout meets a closed pipe with SIGPIPE, unless the
	// signal is watched: then the write fails with EPIPE, which ends the
	// connection like the end of stdin, and the caller's cleanup runs.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	return serve(ctx, opts, &lineTransport{r: os.Stdin, w: nopCloser{os.Stdout}, maxLine: MaxMessageBytes})
}

// nopCloser keeps stdout open when the connection closes: the process may
// still write to it, and it is not ours to close.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// serve is Server.Run without its error-level record of a cancelled
// context, which is an ordinary shutdown here.
func serve(ctx context.Context, opts Options, t mcp.Transport) error {
	ss, err := newServer(opts, ctx, nil).Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("mcpserver: %w", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- ss.Wait() }()
	select {
	case err := <-closed:
		if err != nil {
			return fmt.Errorf("mcpserver: %w", err)
		}
		return nil
	case <-ctx.Done():
		// ctx's end has cancelled the running calls; Close waits for them.
		_ = ss.Close()
		<-closed
		return nil
	}
}

// ListenHTTP binds addr, which must be a loopback address ("127.0.0.1:0"
// picks a free port), for ServeHTTP. Binding before anything else starts
// lets a caller refuse a bad address with nothing created.
func ListenHTTP(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: HTTP address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("mcpserver: refusing to serve on %q: %w", addr, ErrNotLoopback)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	// localhost is whatever the resolver says; check what was bound.
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("mcpserver: refusing to serve on %q, which is %s: %w", addr, ln.Addr(), ErrNotLoopback)
	}
	return ln, nil
}

// URL is the endpoint ServeHTTP serves on ln.
func URL(ln net.Listener) string { return "http://" + ln.Addr().String() + HTTPPath }

// httpIdleTimeout closes a connection that sends no next request, so a
// client (with or without the token) cannot hold connections open for ever;
// it applies only between requests, never to a stream in progress.
var httpIdleTimeout = 2 * time.Minute

// newHTTPHandler is what ServeHTTP serves before its guard: the protocol
// at HTTPPath and opts.Metrics at MetricsPath; stop ends every tool call.
func newHTTPHandler(stop context.Context, opts Options, logger *slog.Logger) (*mcp.Server, *sessionEnds, http.Handler) {
	ended := &sessionEnds{}
	server := newServer(opts, stop, ended)
	mux := http.NewServeMux()
	mux.Handle(HTTPPath, ended.handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Logger: logger, MaxRequestBodyBytes: MaxMessageBytes, SessionTimeout: opts.SessionIdleTimeout})))
	if opts.Metrics != nil {
		mux.Handle("GET "+MetricsPath, opts.Metrics)
	}
	return server, ended, mux
}

// ServeHTTP serves the streamable HTTP transport at HTTPPath on ln, from
// ListenHTTP, and closes ln. Every request must name this server in its Host
// header, carry no Origin but this server's, and carry
// "Authorization: Bearer TOKEN"; a POST body over MaxMessageBytes is
// refused as on stdio. Any number of clients may connect; they share the
// Toolbox. It returns when serving fails, or nil when ctx ends, after
// cancelling the tool calls still running and closing every connection.
func ServeHTTP(ctx context.Context, ln net.Listener, token string, opts Options) error {
	if err := CheckToken(token); err != nil {
		ln.Close()
		return fmt.Errorf("mcpserver: %w", err)
	}
	tcp, ok := ln.Addr().(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() {
		ln.Close()
		return fmt.Errorf("mcpserver: refusing to serve on %s: %w", ln.Addr(), ErrNotLoopback)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	server, _, mux := newHTTPHandler(ctx, opts, logger)
	srv := &http.Server{Handler: newGuard(mux, tcp, token, MaxMessageBytes), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: httpIdleTimeout}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("serving MCP over streamable HTTP", "url", URL(ln))

	select {
	case err := <-served:
		return fmt.Errorf("mcpserver: %w", err)
	case <-ctx.Done():
	}
	// A session's standalone event stream stays open until the session
	// closes, and Shutdown would wait for it.
	for ss := range server.Sessions() {
		_ = ss.Close()
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("MCP HTTP shutdown: closing the remaining connections", "err", err)
		_ = srv.Close()
	}
	<-served
	return nil
}
