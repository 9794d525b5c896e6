package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Only a request that names this server, comes from no other web origin and
// carries the token reaches the tools; each refusal runs nothing.
func TestHTTPRefusesStrangers(t *testing.T) {
	h, tb, _ := hostServer(t)
	endpoint, token, _ := httpServer(t, tb)
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	port := u.Port()

	// A client with the token opens a session, so that the refused
	// requests below are tool calls on a live session.
	c := httpClient(t, endpoint, token)
	c.mustCall(t, "bash", obj{"command": "true"})
	sessionID := c.cs.ID()
	require.NotEmpty(t, sessionID)
	before := h.Calls()

	call := `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"bash","arguments":{"command":"touch pwned"}}}`
	send := func(host, origin, auth string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(call))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sessionID)
		req.Header.Set("Mcp-Protocol-Version", c.cs.InitializeResult().ProtocolVersion)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	own := "127.0.0.1:" + port
	for _, tc := range []struct {
		name, host, origin, auth string
		status                   int
		says                     string
	}{
		{"no token", own, "", "", http.StatusUnauthorized, "Unauthorized"},
		{"wrong token", own, "", "Bearer " + NewToken(), http.StatusUnauthorized, "Unauthorized"},
		{"token prefix", own, "", "Bearer " + token[:len(token)-1], http.StatusUnauthorized, "Unauthorized"},
		{"token as basic", own, "", "Basic " + token, http.StatusUnauthorized, "Unauthorized"},
		{"evil origin", own, "http://evil.example", "Bearer " + token, http.StatusForbidden, `Origin "http://evil.example" is not this server`},
		{"null origin", own, "null", "Bearer " + token, http.StatusForbidden, `Origin "null" is not this server`},
		{"origin on another port", own, "http://127.0.0.1:1", "Bearer " + token, http.StatusForbidden, "Origin"},
		{"evil host (DNS rebinding)", "evil.example:" + port, "", "Bearer " + token, http.StatusForbidden, `Host "evil.example:`},
		{"rebinding name", "127.0.0.1.nip.io:" + port, "", "Bearer " + token, http.StatusForbidden, "Host"},
		{"host on another port", "localhost:1", "", "Bearer " + token, http.StatusForbidden, "Host"},
	} {
		status, body := send(tc.host, tc.origin, tc.auth)
		assert.Equal(t, tc.status, status, "%s: %s", tc.name, body)
		assert.Contains(t, body, tc.says, tc.name)
	}
	assert.Equal(t, before, h.Calls(), "no refused request ran anything")

	// The server's own origin and names are welcome.
	for _, tc := range []struct{ host, origin string }{
		{own, ""}, {own, "http://127.0.0.1:" + port}, {"localhost:" + port, "http://localhost:" + port},
	} {
		status, body := send(tc.host, tc.origin, "Bearer "+token)
		assert.Equal(t, http.StatusOK, status, "%+v: %s", tc, body)
		assert.Contains(t, body, `"id":99`)
	}
	assert.Equal(t, before+3, h.Calls())

	// An SDK client without the token cannot even connect.
	_, mc := newClient()
	_, err = mc.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, nil)
	assert.ErrorContains(t, err, "Unauthorized")
}

func TestTokens(t *testing.T) {
	a, b := NewToken(), NewToken()
	assert.NotEqual(t, a, b)
	assert.Len(t, a, 43, "32 random bytes")
	assert.NoError(t, CheckToken(a))
	for _, bad := range []string{"", "short", strings.Repeat("a", 31), strings.Repeat("a", 40) + " x", strings.Repeat("é", 40), strings.Repeat("a", 40) + "\n"} {
		assert.ErrorIs(t, CheckToken(bad), ErrBadToken, "%q", bad)
	}
	ln, err := ListenHTTP("127.0.0.1:0")
	require.NoError(t, err)
	assert.ErrorIs(t, ServeHTTP(context.Background(), ln, "weak", Options{}), ErrBadToken)
}

// Over HTTP the message limit is MaxMessageBytes, as on stdio (the SDK's
// default was 4 MiB), and an oversized tools/call is a tool error; the
// server goes on.
func TestHTTPMessageLimit(t *testing.T) {
	_, tb, _ := hostServer(t)
	endpoint, token, _ := httpServer(t, tb)
	c := httpClient(t, endpoint, token)

	// The big calls are sent as bytes, laid out as the TypeScript client
	// does (id last), to spare the race-instrumented test encoding them.
	post := func(path string, size int) (string, string) {
		var body bytes.Buffer
		body.WriteString(`{"method":"tools/call","params":{"name":"write","arguments":{"path":"` + path + `","content":"`)
		body.Write(bytes.Repeat([]byte("x"), size))
		body.WriteString(`"}},"jsonrpc":"2.0","id":"big"}`)
		req, err := http.NewRequest(http.MethodPost, endpoint, &body)
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", c.cs.ID())
		req.Header.Set("Mcp-Protocol-Version", c.cs.InitializeResult().ProtocolVersion)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		answer, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", answer)
		return resp.Header.Get("Content-Type"), string(answer)
	}
	_, answer := post("big.txt", 17<<20)
	assert.Contains(t, answer, `{"jsonrpc":"2.0","id":"big","result":{"content":[{"type":"text","text":"Successfully wrote 17825792 bytes to big.txt"}]}}`)

	contentType, answer := post("huge.txt", MaxMessageBytes)
	assert.Equal(t, "application/json", contentType)
	assert.Contains(t, answer, `{"jsonrpc":"2.0","id":"big","result":{"content":[{"type":"text",`+
		`"text":"Message refused: it is 64.0 MiB, more than the 64 MiB an MCP message to this server may carry.`)
	assert.Contains(t, answer, `"isError":true}}`)

	assert.Equal(t, "alive\n", c.mustCall(t, "bash", obj{"command": "echo alive"}))
}

// A connection that sent one request (refused here: no token) and then
// nothing is closed by the server once idle, not kept for ever.
func TestHTTPClosesIdleConnections(t *testing.T) {
	defer func(d time.Duration) { httpIdleTimeout = d }(httpIdleTimeout)
	httpIdleTimeout = 300 * time.Millisecond
	_, tb, _ := hostServer(t)
	endpoint, _, _ := httpServer(t, tb)
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", u.Path, u.Host)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = conn.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "the idle connection was not closed by the server")
}

// On port 80, clients (curl, browsers, Node's fetch) leave the default port
// out of Host and Origin; the guard still knows its own names.
func TestGuardDefaultPort(t *testing.T) {
	token := NewToken()
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served") })
	g := newGuard(next, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}, token, MaxMessageBytes)
	for _, tc := range []struct {
		host, origin string
		status       int
	}{
		{"127.0.0.1", "", http.StatusOK},
		{"localhost", "http://localhost", http.StatusOK},
		{"127.0.0.1:80", "http://127.0.0.1:80", http.StatusOK},
		{"127.0.0.1", "http://127.0.0.1", http.StatusOK},
		{"evil.example", "", http.StatusForbidden},
		{"127.0.0.1", "http://evil.example", http.StatusForbidden},
		{"127.0.0.1:8080", "", http.StatusForbidden},
	} {
		req := httptest.NewRequest(http.MethodGet, "http://"+tc.host+HTTPPath, nil)
		req.Host = tc.host
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		assert.Equal(t, tc.status, rec.Code, "%+v: %s", tc, rec.Body)
	}
}

// The guard passes a body of exactly its limit through whole, and refuses
// one byte more.
func TestGuardBodyLimitBoundary(t *testing.T) {
	const limit = 1000
	token := NewToken()
	var got []byte
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "served")
	})
	g := newGuard(next, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1234}, token, limit)
	post := func(size int) *httptest.ResponseRecorder {
		body := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bash","arguments":{"command":"#"}}}`
		body = strings.Replace(body, "#", strings.Repeat("x", size-len(body)+1), 1)
		require.Len(t, body, size)
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:1234"+HTTPPath, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		got = nil
		g.ServeHTTP(rec, req)
		return rec
	}
	rec := post(limit)
	assert.Equal(t, "served", rec.Body.String())
	assert.Len(t, got, limit)
	rec = post(limit + 1)
	assert.Nil(t, got, "not passed on")
	assert.Contains(t, rec.Body.String(), `{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"Message refused: it is 1001 bytes, more than the 1000 bytes`)
}
