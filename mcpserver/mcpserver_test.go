package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

func TestMain(m *testing.M) {
	// A signalled stdio child leaves its stdin reader blocked until exit,
	// as any stdio server does; goleak checks the parent.
	if os.Getenv(stdioChildEnv) != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}

// client is an SDK client session that records the progress notifications
// it receives.
type client struct {
	cs *mcp.ClientSession

	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
	started  chan struct{} // closed at the first progress message containing "started"
	once     sync.Once
}

func newClient() (*client, *mcp.Client) {
	c := &client{started: make(chan struct{})}
	return c, mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, req.Params)
			c.mu.Unlock()
			if strings.Contains(req.Params.Message, "started") {
				c.once.Do(func() { close(c.started) })
			}
		},
	})
}

// connect runs server on an in-memory transport and connects a client.
func connect(t *testing.T, server *mcp.Server) *client {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	c, mc := newClient()
	c.cs, err = mc.Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.cs.Close()
		_ = ss.Wait()
	})
	return c
}

func (c *client) notifications() []*mcp.ProgressNotificationParams {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*mcp.ProgressNotificationParams(nil), c.progress...)
}

// progressOf waits until the notifications received carry n bytes of
// output, or 10 s pass, and returns them. The server writes every
// notification before the call's result, but the SDK client hands
// notifications to their handler on its own queue, which may still be
// running when CallTool returns.
func (c *client) progressOf(n int) []*mcp.ProgressNotificationParams {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := c.notifications()
		received := 0
		for _, p := range got {
			received += len(p.Message)
		}
		if received >= n || time.Now().After(deadline) {
			return got
		}
	}
}

// call calls a tool and returns its text and whether it is an error result.
func (c *client) call(t *testing.T, name string, args any) (string, bool) {
	t.Helper()
	res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, "%s %v", name, args)
	return resultText(t, res), res.IsError
}

func (c *client) mustCall(t *testing.T, name string, args any) string {
	t.Helper()
	text, isError := c.call(t, name, args)
	require.False(t, isError, "%s %v: %s", name, args, text)
	return text
}

func resultText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	require.Len(t, res.Content, 1)
	text, ok := res.Content[0].(*mcp.TextContent)
	require.True(t, ok, "content is %T", res.Content[0])
	return text.Text
}

type obj = map[string]any

func hostServer(t *testing.T) (*sessiontest.Host, *tools.Toolbox, *mcp.Server) {
	h := sessiontest.NewHost(t)
	tb := tools.New(h, tools.Options{})
	return h, tb, NewServer(Options{Toolbox: tb, Name: "oma-sandbox-test", Version: "v1.2.3"})
}

func TestListTools(t *testing.T) {
	_, _, server := hostServer(t)
	c := connect(t, server)
	assert.Equal(t, &mcp.Implementation{Name: "oma-sandbox-test", Version: "v1.2.3"}, c.cs.InitializeResult().ServerInfo)

	res, err := c.cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	listed := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		listed[tool.Name] = tool
	}
	defs := tools.Definitions()
	require.Len(t, listed, len(defs))
	for _, def := range defs {
		tool := listed[def.Name]
		require.NotNil(t, tool, def.Name)
		assert.Equal(t, def.Description, tool.Description)
		var want map[string]any
		require.NoError(t, json.Unmarshal(def.InputSchema, &want))
		assert.Equal(t, want, tool.InputSchema, "%s: the schema is served as tools defines it", def.Name)
		schema := tool.InputSchema.(map[string]any)
		assert.Equal(t, "object", schema["type"], def.Name)
		assert.Equal(t, false, schema["additionalProperties"], def.Name)
		assert.Equal(t, readOnly[def.Name], tool.Annotations.ReadOnlyHint, def.Name)
	}
	assert.Equal(t, []string{"bash", "edit", "glob", "grep", "ls", "read", "write"}, tools.Names())
}

func TestEachTool(t *testing.T) {
	h, tb, server := hostServer(t)
	c := connect(t, server)
	ws := h.Paths().Workspace

	assert.Equal(t, "Successfully wrote 11 bytes to notes/a.txt", c.mustCall(t, "write", obj{"path": "notes/a.txt", "content": "alpha\nbeta\n"}))
	assert.Equal(t, "alpha\nbeta\n", c.mustCall(t, "read", obj{"path": "notes/a.txt"}))
	assert.Equal(t, "Successfully replaced 1 block(s) in notes/a.txt.",
		c.mustCall(t, "edit", obj{"path": "notes/a.txt", "edits": []obj{{"oldText": "beta", "newText": "gamma"}}}))
	assert.Equal(t, "alpha\ngamma\n", c.mustCall(t, "read", obj{"path": ws + "/notes/a.txt"}))
	assert.Equal(t, "notes/", c.mustCall(t, "ls", obj{}))
	assert.Equal(t, "a.txt", c.mustCall(t, "ls", obj{"path": "notes"}))
	assert.Equal(t, "notes/a.txt", c.mustCall(t, "glob", obj{"pattern": "*.txt"}))
	assert.Equal(t, ws+"/notes/a.txt", c.mustCall(t, "grep", obj{"pattern": "gam+a", "path": ws}))
	assert.Equal(t, "alpha\ngamma\nto stderr\n", c.mustCall(t, "bash", obj{"command": "cat notes/a.txt; echo to stderr >&2"}))
	assert.Equal(t, map[string]int{"bash": 1, "edit": 1, "glob": 1, "grep": 1, "ls": 2, "read": 2, "write": 1}, tb.Stats(),
		"every call went through tools.Call")
}

func TestToolErrors(t *testing.T) {
	h, _, server := hostServer(t)
	c := connect(t, server)
	ws := h.Paths().Workspace

	for _, tc := range []struct {
		tool string
		args any
		want string
	}{
		{"read", obj{"path": "missing.txt"}, "File not found: missing.txt"},
		{"ls", obj{"path": "nope"}, "Path not found: nope"},
		{"edit", obj{"path": "none.txt", "edits": []obj{{"oldText": "a", "newText": "b"}}}, "Could not edit file: none.txt. File not found: none.txt"},
		{"bash", obj{"command": "echo one; exit 7"}, "one\n\n\nCommand exited with code 7"},
		{"bash", obj{"command": "echo started; sleep 30.71", "timeout": 1}, "started\n\n\nCommand timed out after 1 seconds"},
	} {
		text, isError := c.call(t, tc.tool, tc.args)
		assert.True(t, isError, "%s %v", tc.tool, tc.args)
		assert.Equal(t, tc.want, text, "%s %v", tc.tool, tc.args)
	}

	// Refused input is a tool result with the tools layer's own text, and
	// reaches no sandbox.
	before := h.Calls()
	for _, tc := range []struct {
		tool string
		args string
		want string
	}{
		{"read", `{"path": 3}`, "read: path must be a string"},
		{"read", `{"path": "a", "extra": 1}`, `read: unknown field "extra"`},
		{"read", `{}`, "read: path is required"},
		{"read", `{"path": "../etc/passwd"}`, `read: path "../etc/passwd" escapes ` + ws + ", " + h.Paths().Uploads},
		{"write", `{"path": "a"}`, "write: content is required"},
		{"bash", `{"command": "true", "timeout": -1}`, "bash timeout must be an integer from 0 through 3600 seconds"},
		{"grep", `{"pattern": "x", "path": "rel"}`, "grep path must be absolute"},
	} {
		text, isError := c.call(t, tc.tool, json.RawMessage(tc.args))
		assert.True(t, isError, "%s %s", tc.tool, tc.args)
		assert.Equal(t, tc.want, text, "%s %s", tc.tool, tc.args)
	}
	assert.Equal(t, before, h.Calls(), "refused input reaches no sandbox")

	_, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "nope", Arguments: obj{}})
	assert.ErrorContains(t, err, "nope", "an unknown tool is a protocol error")
}

func TestBashProgress(t *testing.T) {
	_, _, server := hostServer(t)
	c := connect(t, server)

	// "é" is split between two writes: no message may carry half of it.
	params := &mcp.CallToolParams{Name: "bash", Arguments: obj{
		"command": `for i in 1 2 3; do echo "line $i"; sleep 0.3; done; printf '\xc3'; sleep 0.3; printf '\xa9\n'`,
	}}
	params.SetProgressToken("tok-7")
	res, err := c.cs.CallTool(context.Background(), params)
	require.NoError(t, err)
	require.False(t, res.IsError)
	out := resultText(t, res)
	require.Equal(t, "line 1\nline 2\nline 3\né\n", out)

	got := c.progressOf(len(out))
	require.GreaterOrEqual(t, len(got), 3, "output arriving in pauses is sent as it comes")
	var joined strings.Builder
	var last float64
	for _, n := range got {
		assert.Equal(t, "tok-7", n.ProgressToken)
		assert.True(t, utf8.ValidString(n.Message), "%q", n.Message)
		assert.Greater(t, n.Progress, last, "progress increases")
		last = n.Progress
		joined.WriteString(n.Message)
	}
	assert.Equal(t, out, joined.String())
	assert.Equal(t, float64(len(out)), last, "progress counts output bytes")

	// Without a progress token nothing is sent.
	assert.Equal(t, "quiet\n", c.mustCall(t, "bash", obj{"command": "echo quiet; sleep 0.2; echo quiet >/dev/null"}))
	assert.Len(t, c.notifications(), len(got))
}

func TestBashProgressCoalesces(t *testing.T) {
	_, _, server := hostServer(t)
	c := connect(t, server)
	params := &mcp.CallToolParams{Name: "bash", Arguments: obj{"command": "for i in $(seq 1 20000); do echo $i; done"}}
	params.SetProgressToken(42)
	res, err := c.cs.CallTool(context.Background(), params)
	require.NoError(t, err)
	out := resultText(t, res)

	var want strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	got := c.progressOf(want.Len())
	var joined strings.Builder
	for _, n := range got {
		assert.LessOrEqual(t, len(n.Message), maxProgressMessage)
		joined.WriteString(n.Message)
	}
	assert.Equal(t, want.String(), joined.String(), "progress carries the whole output")
	shown, _, ok := strings.Cut(out, "\n\n[Showing lines 18002-20001 of 20001. Full output: ")
	assert.True(t, ok, "the result keeps the last 2000 lines")
	assert.True(t, strings.HasSuffix(want.String(), shown))
	assert.Less(t, len(got), 200, "20000 writes are coalesced into far fewer notifications")
}

// cancelCall starts a long bash call, cancels it from the client once it
// has started, and returns how long the server's handler took to return
// after the cancellation, and the handler's result text.
func cancelCall(t *testing.T, server *mcp.Server, c *client, marker string) (time.Duration, string) {
	t.Helper()
	returned := make(chan string, 1)
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.CallToolResult); ok && method == "tools/call" && r.IsError {
				returned <- resultText(t, r)
			}
			return res, err
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	params := &mcp.CallToolParams{Name: "bash", Arguments: obj{"command": "echo started; sleep " + marker, "timeout": 600}}
	params.SetProgressToken("long")
	callErr := make(chan error, 1)
	go func() {
		_, err := c.cs.CallTool(ctx, params)
		callErr <- err
	}()
	select {
	case <-c.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not start")
	}
	cancel()
	start := time.Now()
	require.ErrorIs(t, <-callErr, context.Canceled)
	select {
	case text := <-returned:
		return time.Since(start), text
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled call did not return")
	}
	return 0, ""
}

// uniqueSleep is a sleep duration that names one test's guest process.
func uniqueSleep() string { return fmt.Sprintf("300.%06d", rand.IntN(1_000_000)) }

func TestCancelKillsGuestWork(t *testing.T) {
	_, _, server := hostServer(t)
	c := connect(t, server)
	marker := uniqueSleep()
	took, text := cancelCall(t, server, c, marker)
	assert.Less(t, took, 10*time.Second, "the call ends promptly")
	assert.Contains(t, text, session.ErrAborted.Error())
	assert.Equal(t, "0\n", c.mustCall(t, "bash", obj{"command": "ps -eo args | grep -c '[s]leep " + marker + "' || true"}),
		"no guest process is left")
}

func TestIncompleteSuffix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 0},
		{"é", 0},
		{"a\xc3", 1},
		{"a\xe2\x82", 2},
		{"\xf0\x9f\x98", 3},
		{"\xf0\x9f\x98\x80", 0},
		{"a\xff", 0},
		{"\x80\x80\x80", 0},
	} {
		assert.Equal(t, tc.want, incompleteSuffix([]byte(tc.in)), "%q", tc.in)
	}
}

func TestMessageCut(t *testing.T) {
	assert.Equal(t, 3, messageCut([]byte("abc"), 5))
	assert.Equal(t, 4, messageCut([]byte("abcdef"), 4))
	assert.Equal(t, 3, messageCut([]byte("abcé"), 4), "a character is not split")
	assert.Equal(t, 4, messageCut([]byte("\x80\x80\x80\x80\x80\x80"), 4), "invalid input is cut at the bound")
}

// Malformed arguments of every kind are a tool error naming what is wrong,
// run nothing, and leave the server serving.
func TestMalformedArguments(t *testing.T) {
	h, _, server := hostServer(t)
	c := connect(t, server)
	before := h.Calls()
	for _, tc := range []struct {
		tool, args, want string
	}{
		{"read", `null`, "read input must be a JSON object"},
		{"read", `[]`, "read input must be a JSON object"},
		{"read", `"a.txt"`, "read input must be a JSON object"},
		{"read", `{"path": null}`, "read: path is required"},
		{"read", `{"path": ["a"]}`, "read: path must be a string"},
		{"read", `{"path": "a", "offset": -1}`, "read: offset must be an integer from 0 through"},
		{"read", `{"path": "a", "offset": 1.5}`, "read: offset must be an integer"},
		{"read", `{"path": "a", "offset": "3"}`, "read: offset must be an integer"},
		{"read", `{"path": "a", "offset": 1e400}`, "read: offset must be an integer"},
		{"read", `{"path": "a", "offset": 1e300}`, "read: offset must be an integer"},
		{"read", `{"path": "a", "limit": 0}`, "read: limit must be an integer from 1 through"},
		{"read", `{"path": "a", "limit": true}`, "read: limit must be an integer"},
		{"ls", `{"limit": 99999999999999999999}`, "ls: limit must be an integer"},
		{"ls", `{"limit": -5}`, "ls: limit must be an integer from 1 through"},
		{"bash", `{"command": "true", "timeout": 3601}`, "bash timeout must be an integer from 0 through 3600 seconds"},
		{"bash", `{"command": 7}`, "bash: command must be a string"},
		{"bash", `{}`, "bash: command is required"},
		{"edit", `{"path": "a", "edits": {"oldText": "a", "newText": "b"}}`, "edit: edits must be an array"},
		{"edit", `{"path": "a", "edits": [{"oldText": "a"}]}`, "edit:"},
		{"grep", `{"pattern": "x", "path": "/", "head_limit": 0}`, "grep head_limit must be an integer from 1 through 100"},
		{"write", `{"path": "a", "content": "x", "Path": "b"}`, `write: unknown field "Path"`},
	} {
		text, isError := c.call(t, tc.tool, json.RawMessage(tc.args))
		assert.True(t, isError, "%s %s: %s", tc.tool, tc.args, text)
		assert.Contains(t, text, tc.want, "%s %s", tc.tool, tc.args)
	}
	assert.Equal(t, before, h.Calls(), "refused input reaches no sandbox")
	assert.Equal(t, "ok\n", c.mustCall(t, "bash", obj{"command": "echo ok"}))
}

// Many calls in parallel run at once, each gets its own result, and each
// call's progress carries its own output only.
func TestParallelCalls(t *testing.T) {
	_, _, server := hostServer(t)
	c := connect(t, server)
	const n = 16
	begin := time.Now()
	var wg sync.WaitGroup
	texts := make([]string, n)
	for i := range n {
		wg.Go(func() {
			params := &mcp.CallToolParams{Name: "bash", Arguments: obj{"command": fmt.Sprintf("echo start-%d; sleep 1; echo end-%d", i, i)}}
			params.SetProgressToken(fmt.Sprintf("call-%d", i))
			res, err := c.cs.CallTool(context.Background(), params)
			if assert.NoError(t, err) && assert.False(t, res.IsError) {
				texts[i] = res.Content[0].(*mcp.TextContent).Text
			}
		})
	}
	wg.Wait()
	assert.Less(t, time.Since(begin), 8*time.Second, "the calls ran in parallel")
	want := 0
	for i := range n {
		assert.Equal(t, fmt.Sprintf("start-%d\nend-%d\n", i, i), texts[i])
		want += len(texts[i])
	}
	byToken := map[any]string{}
	for _, p := range c.progressOf(want) {
		byToken[p.ProgressToken] += p.Message
	}
	for i := range n {
		assert.Equal(t, texts[i], byToken[fmt.Sprintf("call-%d", i)], "call %d's progress", i)
	}
}
