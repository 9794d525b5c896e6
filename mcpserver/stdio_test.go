package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawClient speaks newline-delimited JSON-RPC to a stdio server process
// byte for byte, so that it can send what no SDK client would.
type rawClient struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Reader
	cmd *exec.Cmd
}

func startStdioChild(t *testing.T) *rawClient {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStdioChild$")
	cmd.Env = append(os.Environ(), stdioChildEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &rawClient{t: t, in: in, out: bufio.NewReaderSize(out, 1<<20), cmd: cmd}
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	require.Contains(t, c.receive(), `"serverInfo"`)
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *rawClient) send(line string) {
	c.t.Helper()
	_, err := io.WriteString(c.in, line+"\n")
	require.NoError(c.t, err, "the server is still reading")
}

// receive returns the next line the server writes, failing after 60s or
// when the server closed its output.
func (c *rawClient) receive() string {
	c.t.Helper()
	type result struct {
		line string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := c.out.ReadString('\n')
		got <- result{line, err}
	}()
	select {
	case r := <-got:
		require.NoError(c.t, r.err, "the server closed its output")
		return strings.TrimSuffix(r.line, "\n")
	case <-time.After(60 * time.Second):
		c.t.Fatal("no answer from the server")
		return ""
	}
}

// toolText calls a tool with a raw request line and returns the result's
// text and isError.
func (c *rawClient) toolText(line string, id int) (string, bool) {
	c.t.Helper()
	c.send(line)
	var resp struct {
		ID     int `json:"id"`
		Result struct {
			Content []struct{ Text string }
			IsError bool `json:"isError"`
		}
	}
	require.NoError(c.t, json.Unmarshal([]byte(c.receive()), &resp))
	require.Equal(c.t, id, resp.ID)
	require.Len(c.t, resp.Result.Content, 1)
	return resp.Result.Content[0].Text, resp.Result.IsError
}

func (c *rawClient) alive(id int) {
	c.t.Helper()
	text, isError := c.toolText(`{"jsonrpc":"2.0","id":`+itoa(id)+`,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo alive"}}}`, id)
	require.False(c.t, isError, text)
	require.Equal(c.t, "alive\n", text)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A line that is not JSON, or not a JSON-RPC message, is answered with the
// JSON-RPC error for it, and the stdio server goes on serving.
func TestStdioAnswersBadLinesAndGoesOn(t *testing.T) {
	c := startStdioChild(t)
	for _, tc := range []struct{ line, want string }{
		{`this is not json`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the line is not JSON"}}`},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call"`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: the line is not JSON"}}`},
		{`[{"jsonrpc":"2.0","id":2,"method":"ping"}]`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: JSON-RPC batches are not supported"}}`},
		{`{"jsonrpc":"2.0","id":"three","method":7}`, `"id":"three","error":{"code":-32600,"message":"Invalid Request: `},
		{`42`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: `},
	} {
		c.send(tc.line)
		assert.Contains(t, c.receive(), tc.want, tc.line)
		c.alive(10)
	}
	c.send("")
	c.send("   \r")
	c.alive(11)
	require.NoError(t, c.in.Close())
	require.NoError(t, c.cmd.Wait(), "the server exits 0 when its input ends")
}

// A message longer than MaxMessageBytes is refused as a tool error and the
// server goes on serving; one above the SDK's own 16 MiB line limit (which
// ended the server and, in the CLI, removed its session) is served.
func TestStdioMessageLimit(t *testing.T) {
	c := startStdioChild(t)
	write := func(id int, path string, size int) (string, bool) {
		// The TypeScript SDK's layout: the id comes last.
		return c.toolText(`{"method":"tools/call","params":{"name":"write","arguments":{"path":"`+path+
			`","content":"`+strings.Repeat("x", size)+`"}},"jsonrpc":"2.0","id":`+itoa(id)+`}`, id)
	}
	text, isError := write(1, "big.txt", 17<<20)
	assert.False(t, isError, text)
	assert.Equal(t, "Successfully wrote 17825792 bytes to big.txt", text)
	c.alive(2)

	text, isError = write(3, "huge.txt", MaxMessageBytes)
	assert.True(t, isError)
	assert.Contains(t, text, "Message refused: it is 64.0 MiB, more than the 64 MiB an MCP message to this server may carry.")
	c.alive(4)
	require.NoError(t, c.in.Close())
	require.NoError(t, c.cmd.Wait())
}

// pipeServer serves a lineTransport with a small line limit over pipes.
func pipeServer(t *testing.T, maxLine int) *rawClient {
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	_, tb, _ := hostServer(t)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- serve(ctx, Options{Toolbox: tb}, &lineTransport{r: toServer, w: fromServer, maxLine: maxLine})
	}()
	t.Cleanup(func() {
		stop()
		_ = fromClient.Close()
		_ = toClient.Close()
		require.NoError(t, <-served)
	})
	c := &rawClient{t: t, in: fromClient, out: bufio.NewReader(toClient)}
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	require.Contains(t, c.receive(), `"serverInfo"`)
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

// Each kind of oversized message gets its own answer: a tools/call a tool
// error, another request a JSON-RPC error with its id, a message whose id
// cannot be used one with a null id, a notification none.
func TestOversizedMessageAnswers(t *testing.T) {
	const limit = 4096
	c := pipeServer(t, limit)
	pad := strings.Repeat("p", limit)
	for _, tc := range []struct{ line, want string }{
		{`{"method":"tools/call","params":{"name":"bash","arguments":{"command":"` + pad + `"}},"jsonrpc":"2.0","id":7}`,
			`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"Message refused: it is 4195 bytes, more than the 4096 bytes an MCP message to this server may carry.`},
		{`{"jsonrpc":"2.0","id":"s\"q","method":"tools/call","params":{"name":"write","arguments":{"path":"a","content":"` + pad + `"}}}`,
			`{"jsonrpc":"2.0","id":"s\"q","result":{"content":[{"type":"text","text":"Message refused`},
		{`{"jsonrpc":"2.0","id":8,"method":"ping","params":{"pad":"` + pad + `"}}`,
			`{"jsonrpc":"2.0","id":8,"error":{"code":-32600,"message":"Invalid Request: Message refused`},
		{`{"jsonrpc":"2.0","id":{"x":1},"method":"tools/call","params":{"pad":"` + pad + `"}}`,
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: Message refused`},
		{`"` + pad + `"`,
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: Message refused`},
	} {
		c.send(tc.line)
		assert.Contains(t, c.receive(), tc.want)
		c.alive(1)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"pad":"` + pad + `"}}`)
	c.alive(2)

	// A message just within the limit is served.
	call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo ok #"}}}`
	fill := strings.Repeat("f", limit-len(call))
	text, isError := c.toolText(strings.Replace(call, "#", "#"+fill, 1), 3)
	assert.False(t, isError, text)
	assert.Equal(t, "ok\n", text)
}

// A client that stops reading (its end of stdout closed) while a call
// streams progress is a disconnect: the server cancels the call, killing its
// guest work, and returns nil; the process is not killed by SIGPIPE, which
// would leave the CLI's session behind.
func TestStdioClosedStdoutIsADisconnect(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestStdioChild$")
	cmd.Env = append(os.Environ(), stdioChildEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer in.Close()
	c := &rawClient{t: t, in: in, out: bufio.NewReader(out), cmd: cmd}
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	require.Contains(t, c.receive(), `"serverInfo"`)
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	marker := uniqueSleep()
	c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"p"},"name":"bash","arguments":{"command":"while :; do echo tick; sleep 0.05; done & sleep ` + marker + `","timeout":600}}}`)
	require.Contains(t, c.receive(), `"notifications/progress"`)
	require.NoError(t, out.Close(), "the client stops reading")

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		require.NoError(t, err, "the server returns nil, not killed by SIGPIPE (%v)", cmd.ProcessState)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("the server went on with nobody reading its output")
	}
	ps, _ := exec.Command("ps", "-eo", "args").Output()
	assert.NotContains(t, string(ps), "sleep "+marker, "no guest process is left")
}

// In process: a write that finds the client's end closed ends the
// connection as a disconnect, so serve returns nil and the running call is
// cancelled.
func TestStdioWriteToClosedPipeIsADisconnect(t *testing.T) {
	c, toClient, served := servePipes(t)
	defer c.in.Close()
	marker := uniqueSleep()
	c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"p"},"name":"bash","arguments":{"command":"while :; do echo tick; sleep 0.05; done & sleep ` + marker + `","timeout":600}}}`)
	require.Contains(t, c.receive(), `"notifications/progress"`)
	require.NoError(t, toClient.Close(), "the client stops reading")
	select {
	case err := <-served:
		require.NoError(t, err, "a client that stopped reading has disconnected")
	case <-time.After(30 * time.Second):
		t.Fatal("serve went on with nobody reading")
	}
	ps, _ := exec.Command("ps", "-eo", "args").Output()
	assert.NotContains(t, string(ps), "sleep "+marker, "no guest process is left")
}

// The end of stdin with a call running (the client exited) cancels the
// call, killing its guest work, and serve returns nil promptly.
func TestStdioEOFCancelsRunningCall(t *testing.T) {
	c, toClient, served := servePipes(t)
	defer toClient.Close()
	marker := uniqueSleep()
	c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"p"},"name":"bash","arguments":{"command":"echo started; sleep ` + marker + `","timeout":600}}}`)
	require.Contains(t, c.receive(), `started`)
	go func() { _, _ = io.Copy(io.Discard, toClient) }()
	begin := time.Now()
	require.NoError(t, c.in.Close())
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after the end of its input")
	}
	assert.Less(t, time.Since(begin), 10*time.Second)
	ps, _ := exec.Command("ps", "-eo", "args").Output()
	assert.NotContains(t, string(ps), "sleep "+marker, "no guest process is left")
}

// notifications/cancelled on stdio kills the command and the server goes on.
func TestStdioCancelledNotification(t *testing.T) {
	c := pipeServer(t, MaxMessageBytes)
	marker := uniqueSleep()
	c.send(`{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"_meta":{"progressToken":"p"},"name":"bash","arguments":{"command":"echo started; sleep ` + marker + `","timeout":600}}}`)
	require.Contains(t, c.receive(), `started`)
	c.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c1","reason":"user"}}`)
	// The SDK still answers the cancelled call, which the client ignores.
	line := c.receive()
	t.Log(line)
	assert.Contains(t, line, `"id":"c1"`)
	c.alive(2)
	text, isError := c.toolText(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"ps -eo args | grep -c '[s]leep `+marker+`' || true"}}}`, 3)
	assert.False(t, isError)
	assert.Equal(t, "0\n", text, "no guest process is left")
}

// servePipes serves this package's stdio transport over pipes in process,
// initialized by a raw client; served gets what serve returns.
func servePipes(t *testing.T) (c *rawClient, toClient *io.PipeReader, served <-chan error) {
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	_, tb, _ := hostServer(t)
	done := make(chan error, 1)
	go func() {
		done <- serve(context.Background(), Options{Toolbox: tb}, &lineTransport{r: toServer, w: fromServer, maxLine: MaxMessageBytes})
	}()
	c = &rawClient{t: t, in: fromClient, out: bufio.NewReader(toClient)}
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	require.Contains(t, c.receive(), `"serverInfo"`)
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c, toClient, done
}
