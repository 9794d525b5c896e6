package mcpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// pipeTransports are two connected stdio-like transports; closing the
// client's writer is what a client process exiting looks like to a stdio
// server.
func pipeTransports() (server, client *mcp.IOTransport, hangUp func()) {
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	server = &mcp.IOTransport{Reader: toServer, Writer: fromServer}
	client = &mcp.IOTransport{Reader: toClient, Writer: fromClient}
	return server, client, func() { fromClient.Close() }
}

// msbSession creates a session on a private fakemsb.
func msbSession(t *testing.T) (*fakemsbtest.Env, *microvm.Session) {
	env := fakemsbtest.New(t)
	s, err := microvm.Create(context.Background(), microvm.Options{
		Client: msb.NewClient(&msb.CLI{Path: env.Bin}), WorkspaceID: "ws-mcp", SessionID: strings.ToLower(t.Name()), Image: "debian",
	})
	require.NoError(t, err)
	require.Len(t, env.Sandboxes(t), 1)
	return env, s
}

// closeAndCheck closes the session as the CLI does once the server has
// returned, and checks that fakemsb keeps nothing.
func closeAndCheck(t *testing.T, env *fakemsbtest.Env, s session.Session) {
	require.NoError(t, s.Close(context.Background()))
	assert.Empty(t, env.Sandboxes(t), "no sandbox left")
	assert.Empty(t, env.Volumes(t), "no volume left")
}

// Cancellation from the client kills the guest's process group in the
// sandbox, as a host timeout does.
func TestMsbCancelKillsGuestWork(t *testing.T) {
	env, s := msbSession(t)
	server := NewServer(Options{Toolbox: tools.New(s, tools.Options{})})
	c := connect(t, server)
	assert.Equal(t, "Successfully wrote 2 bytes to a.txt", c.mustCall(t, "write", obj{"path": "a.txt", "content": "hi"}))
	marker := uniqueSleep()
	took, text := cancelCall(t, server, c, marker)
	assert.Less(t, took, 10*time.Second, "the call ends promptly")
	assert.Contains(t, text, session.ErrAborted.Error())
	assert.Equal(t, "0\n", c.mustCall(t, "bash", obj{"command": "ps -eo args | grep -c '[s]leep " + marker + "' || true"}),
		"no guest process is left")
	assert.False(t, s.Poisoned())
	require.NoError(t, c.cs.Close())
	closeAndCheck(t, env, s)
}

// A server stopped by its context (SIGINT/SIGTERM in the CLI) or left by
// its client returns promptly even with a long call running, whose guest
// work is killed; closing the session then leaves fakemsb empty.
func TestMsbShutdownLeavesNothing(t *testing.T) {
	for _, how := range []string{"signal", "disconnect"} {
		t.Run(how, func(t *testing.T) {
			env, s := msbSession(t)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			st, ct, hangUp := pipeTransports()
			served := make(chan error, 1)
			go func() { served <- serve(ctx, Options{Toolbox: tools.New(s, tools.Options{})}, st) }()

			c, mc := newClient()
			var err error
			c.cs, err = mc.Connect(context.Background(), ct, nil)
			require.NoError(t, err)
			assert.Equal(t, "ok\n", c.mustCall(t, "bash", obj{"command": "echo ok"}))

			marker := uniqueSleep()
			params := &mcp.CallToolParams{Name: "bash", Arguments: obj{"command": "echo started; sleep " + marker, "timeout": 600}}
			params.SetProgressToken(1)
			type result struct {
				res *mcp.CallToolResult
				err error
			}
			long := make(chan result, 1)
			go func() {
				res, err := c.cs.CallTool(context.Background(), params)
				long <- result{res, err}
			}()
			<-c.started

			begin := time.Now()
			if how == "signal" {
				stop()
			} else {
				hangUp()
			}
			select {
			case err := <-served:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("the server did not return")
			}
			assert.Less(t, time.Since(begin), 10*time.Second, "the server returns promptly")
			_ = c.cs.Close()
			// The connection closed under the running call.
			assert.Error(t, (<-long).err)

			res, err := s.Shell(context.Background(), session.Command{Script: `ps -eo args | grep -c "[s]leep $1" || true`, Args: []string{marker}}, session.ShellOptions{})
			require.NoError(t, err)
			assert.Equal(t, "0\n", string(res.Stdout), "no guest process is left")
			closeAndCheck(t, env, s)
		})
	}
}

const stdioChildEnv = "MCPSERVER_TEST_STDIO_CHILD"

// TestStdioChild is the server process of TestServeStdio.
func TestStdioChild(t *testing.T) {
	if os.Getenv(stdioChildEnv) == "" {
		t.Skip("run by TestServeStdio")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := ServeStdio(ctx, Options{Toolbox: tools.New(sessiontest.NewHost(t), tools.Options{})})
	// The protocol owned stdout; the test verdict goes elsewhere.
	os.Stdout = os.Stderr
	require.NoError(t, err)
}

func TestServeStdio(t *testing.T) {
	start := func(t *testing.T) (*client, *exec.Cmd) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStdioChild$")
		cmd.Env = append(os.Environ(), stdioChildEnv+"=1")
		cmd.Stderr = os.Stderr
		c, mc := newClient()
		var err error
		c.cs, err = mc.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		require.NoError(t, err)
		res, err := c.cs.ListTools(context.Background(), nil)
		require.NoError(t, err)
		assert.Len(t, res.Tools, len(tools.Names()))
		assert.Equal(t, "hi\n", c.mustCall(t, "bash", obj{"command": "echo hi"}))
		return c, cmd
	}

	t.Run("client closes", func(t *testing.T) {
		c, cmd := start(t)
		require.NoError(t, c.cs.Close(), "the server exits 0 once its stdin ends")
		assert.True(t, cmd.ProcessState.Success())
	})

	t.Run("SIGTERM", func(t *testing.T) {
		c, cmd := start(t)
		marker := uniqueSleep()
		params := &mcp.CallToolParams{Name: "bash", Arguments: obj{"command": "echo started; sleep " + marker, "timeout": 600}}
		params.SetProgressToken("p")
		done := make(chan error, 1)
		go func() {
			_, err := c.cs.CallTool(context.Background(), params)
			done <- err
		}()
		<-c.started
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-done:
			assert.Error(t, err, "the server closed the connection under the running call")
		case <-time.After(30 * time.Second):
			t.Fatal("the running call did not end")
		}
		require.NoError(t, c.cs.Close())
		assert.True(t, cmd.ProcessState.Success(), "a signalled server exits cleanly")
		out, _ := exec.Command("ps", "-eo", "args").Output()
		assert.NotContains(t, string(out), "sleep "+marker, "no guest process is left")
	})
}

// bearer adds the Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// httpServer serves tb over HTTP on a free loopback port with a fresh
// token until the test ends.
func httpServer(t *testing.T, tb *tools.Toolbox) (url, token string, stop func()) {
	return httpServerWith(t, Options{Toolbox: tb})
}

func httpServerWith(t *testing.T, opts Options) (url, token string, stop func()) {
	ln, err := ListenHTTP("127.0.0.1:0")
	require.NoError(t, err)
	url, token = URL(ln), NewToken()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeHTTP(ctx, ln, token, opts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-served:
				require.NoError(t, err)
			case <-time.After(15 * time.Second):
				t.Fatal("ServeHTTP did not return")
			}
		})
	}
	t.Cleanup(stop)
	return url, token, stop
}

// httpClient connects an SDK client with the token.
func httpClient(t *testing.T, url, token string) *client {
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	c, mc := newClient()
	var err error
	c.cs, err = mc.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, transport}}, MaxRetries: -1,
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.cs.Close() })
	return c
}

func TestServeHTTP(t *testing.T) {
	_, tb, _ := hostServer(t)
	url, token, stop := httpServer(t, tb)
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:") && strings.HasSuffix(url, HTTPPath), url)

	c := httpClient(t, url, token)
	res, err := c.cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	assert.Len(t, res.Tools, len(tools.Names()))
	assert.Equal(t, "Successfully wrote 1 bytes to h.txt", c.mustCall(t, "write", obj{"path": "h.txt", "content": "h"}))

	params := &mcp.CallToolParams{Name: "bash", Arguments: obj{"command": "echo started; sleep 0.3; echo more"}}
	params.SetProgressToken("http")
	call, err := c.cs.CallTool(context.Background(), params)
	require.NoError(t, err)
	assert.Equal(t, "started\nmore\n", resultText(t, call))
	var joined strings.Builder
	for _, n := range c.progressOf(len("started\nmore\n")) {
		joined.WriteString(n.Message)
	}
	assert.Equal(t, "started\nmore\n", joined.String(), "progress reaches an HTTP client")

	// Stopping with a client still connected (its event stream open).
	stop()
}

// A client gone without a DELETE leaves its session: past
// SessionIdleTimeout the SDK closes it and its entry of the sessions' ends
// goes with it, and the client's next request is answered 404; a call
// running longer than the timeout is not cut short.
func TestHTTPIdleSessionIsForgotten(t *testing.T) {
	_, tb, _ := hostServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, ended, h := newHTTPHandler(ctx, Options{Toolbox: tb, SessionIdleTimeout: 300 * time.Millisecond}, slog.New(slog.DiscardHandler))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the client's close: Close waits for its event stream
	url := srv.URL + HTTPPath
	entries := func() int {
		ended.mu.Lock()
		defer ended.mu.Unlock()
		return len(ended.sessions)
	}

	// A client that goes away sends nothing more, no DELETE either.
	var away atomic.Bool
	c, mc := newClient()
	cs, err := mc.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: url, HTTPClient: &http.Client{Transport: goneAway{&away, srv.Client().Transport}}, MaxRetries: -1,
	}, nil)
	require.NoError(t, err)
	c.cs = cs
	t.Cleanup(func() { _ = cs.Close() })
	// A call outlasting the timeout holds its session open: not ended.
	assert.Equal(t, "x\n", c.mustCall(t, "bash", obj{"command": "sleep 1; echo x"}))
	assert.Equal(t, 1, entries(), "a session that called a tool has an entry")
	away.Store(true)
	require.Eventually(t, func() bool { return entries() == 0 }, 15*time.Second, 20*time.Millisecond,
		"the idle session's entry is kept")

	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	require.NoError(t, err)
	req.Header.Set("Mcp-Session-Id", c.cs.ID())
	req.Header.Set("Mcp-Protocol-Version", c.cs.InitializeResult().ProtocolVersion)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "the idle session still answers")
}

// goneAway is a client's transport that fails every request once away.
type goneAway struct {
	away *atomic.Bool
	next http.RoundTripper
}

func (g goneAway) RoundTrip(r *http.Request) (*http.Response, error) {
	if g.away.Load() {
		return nil, errors.New("the client went away")
	}
	return g.next.RoundTrip(r)
}

func TestListenHTTPRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080", "example.com:80", "127.0.0.1.nip.io:80"} {
		_, err := ListenHTTP(addr)
		assert.ErrorIs(t, err, ErrNotLoopback, addr)
		assert.ErrorContains(t, err, "loopback", addr)
	}
	_, err := ListenHTTP("127.0.0.1")
	assert.ErrorContains(t, err, "missing port")
	assert.False(t, errors.Is(err, ErrNotLoopback))
}

// TestServeHTTPMetrics: Options.Metrics is served at MetricsPath, to GET
// only, behind the Host and token checks; without it there is no such path.
func TestServeHTTPMetrics(t *testing.T) {
	_, tb, _ := hostServer(t)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "oma_test 1\n") })
	url, token, _ := httpServerWith(t, Options{Toolbox: tb, Metrics: metrics})
	metricsURL := strings.TrimSuffix(url, HTTPPath) + MetricsPath
	get := func(method, auth, host string) (int, string) {
		req, err := http.NewRequest(method, metricsURL, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		if host != "" {
			req.Host = host
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	code, body := get(http.MethodGet, token, "")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "oma_test 1\n", body)
	code, _ = get(http.MethodGet, "", "")
	assert.Equal(t, http.StatusUnauthorized, code, "no token")
	code, _ = get(http.MethodGet, NewToken(), "")
	assert.Equal(t, http.StatusUnauthorized, code, "another token")
	code, _ = get(http.MethodGet, token, "evil.example:80")
	assert.Equal(t, http.StatusForbidden, code, "another Host")
	code, _ = get(http.MethodPost, token, "")
	assert.Equal(t, http.StatusMethodNotAllowed, code)

	url, token, _ = httpServer(t, tb)
	metricsURL = strings.TrimSuffix(url, HTTPPath) + MetricsPath
	code, _ = get(http.MethodGet, token, "")
	assert.Equal(t, http.StatusNotFound, code, "no metrics handler")
}

// Over HTTP, a client's cancellation kills the command, and a client that
// ends its session (DELETE) with a call running ends the call too.
func TestHTTPCancelAndCloseKillGuestWork(t *testing.T) {
	_, tb, _ := hostServer(t)
	url, token, _ := httpServer(t, tb)
	gone := func(c *client, marker string) {
		t.Helper()
		assert.Equal(t, "0\n", c.mustCall(t, "bash", obj{"command": "ps -eo args | grep -c '[s]leep " + marker + "' || true"}),
			"no guest process is left")
	}
	start := func(c *client, ctx context.Context) (string, chan error) {
		marker := uniqueSleep()
		params := &mcp.CallToolParams{Name: "bash", Arguments: obj{"command": "echo started; sleep " + marker, "timeout": 600}}
		params.SetProgressToken("long")
		done := make(chan error, 1)
		go func() {
			_, err := c.cs.CallTool(ctx, params)
			done <- err
		}()
		select {
		case <-c.started:
		case <-time.After(30 * time.Second):
			t.Fatal("the command did not start")
		}
		return marker, done
	}

	t.Run("cancel", func(t *testing.T) {
		c := httpClient(t, url, token)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		marker, done := start(c, ctx)
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		time.Sleep(500 * time.Millisecond)
		gone(c, marker)
	})
	// The SDK's client waits for its calls before it ends its session, but
	// others (the TypeScript SDK's terminateSession) do not.
	t.Run("DELETE", func(t *testing.T) {
		c := httpClient(t, url, token)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel) // before the client's Close, which waits for the call
		marker, done := start(c, ctx)
		req, err := http.NewRequest(http.MethodDelete, url, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Mcp-Session-Id", c.cs.ID())
		req.Header.Set("Mcp-Protocol-Version", c.cs.InitializeResult().ProtocolVersion)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		require.NoError(t, err, "the DELETE returns")
		resp.Body.Close()
		assert.Equal(t, http.StatusNoContent, resp.StatusCode)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the call did not end with its session")
		}
		gone(httpClient(t, url, token), marker)
	})
}
