package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// BenchmarkLocalMCP is a tool call through MCP on the local backend, side
// by side in one run: `oma-sandbox mcp --attach NAME`, the server an agent
// runtime starts, called by a client that writes each request line to its
// stdin and reads the answer line from its stdout and does nothing else
// (ours: what the server costs; a runtime's client adds its own); a second
// such server called through the MCP Go SDK's client ("sdk-client"); the
// same call through the library on the session attached in this process
// ("library"); and the floor (a fresh minimal bubblewrap sandbox running
// true). All three reach the session's resident sandbox.
func BenchmarkLocalMCP(b *testing.B) {
	floor := bwrapFloor(b)
	cli := buildCommand(b, cliPackage, "0")
	state, name := cliSession(b, cli)
	ctx := context.Background()
	sess, err := local.Attach(ctx, state, name)
	check(b, err)
	mustShell(b, sess, fixtureScript)
	lib := tools.New(sess, tools.Options{})
	serve := func() *exec.Cmd { return exec.Command(cli, "--state-dir", state, "mcp", "--attach", name) }
	raw := startLineClient(b, serve())
	sdk, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: serve()}, nil)
	check(b, err)
	b.Cleanup(func() { _ = sdk.Close() })

	// Each side writes and edits files of its own (edit files of the
	// fixture's), so every edit changes its file.
	ws := sess.Paths().Workspace
	editFiles := map[string]string{"ours": "bench/edit-ours.txt", "sdk-client": "bench/edit-seed.txt", "library": "bench/edit-cold-ours.txt"}
	flipped := map[string]bool{}
	input := func(tool, side string) map[string]any {
		switch tool {
		case "read":
			return map[string]any{"path": "bench/read.txt"}
		case "write":
			return map[string]any{"path": "bench/out/" + side + ".txt", "content": "written by the benchmark\n"}
		case "edit":
			flipped[side] = !flipped[side]
			from, to := "alpha", "omega"
			if !flipped[side] {
				from, to = to, from
			}
			return map[string]any{"path": editFiles[side], "oldText": from, "newText": to}
		case "ls":
			return map[string]any{"path": "bench/sub"}
		case "glob":
			return map[string]any{"pattern": "sub/*.txt", "path": "bench"}
		case "grep":
			return map[string]any{"pattern": "needle", "path": ws + "/bench"}
		}
		return map[string]any{"command": "echo hello"}
	}
	for _, tool := range []string{"read", "write", "edit", "ls", "glob", "grep", "bash"} {
		b.Run("tool="+tool, func(b *testing.B) {
			s := newSideBySide(b)
			for b.Loop() {
				s.round(
					variant{"ours", func() { raw.call(b, tool, input(tool, "ours")) }},
					variant{"sdk-client", func() { callMCP(b, sdk, tool, input(tool, "sdk-client")) }},
					variant{"library", func() { call(b, lib, tool, input(tool, "library")) }},
					variant{"floor", func() { check(b, floor()) }},
				)
			}
			s.report()
		})
	}
}

// lineClient speaks MCP to a stdio server as plainly as a client can: a
// request line written, lines read until the one answering it.
type lineClient struct {
	in  io.WriteCloser
	out *bufio.Reader
	id  int
}

// startLineClient starts server, initializes the MCP session with it, and
// ends both when b ends.
func startLineClient(b *testing.B, server *exec.Cmd) *lineClient {
	b.Helper()
	in, err := server.StdinPipe()
	check(b, err)
	out, err := server.StdoutPipe()
	check(b, err)
	server.Stderr = os.Stderr
	check(b, server.Start())
	b.Cleanup(func() {
		_ = in.Close() // the server exits when its stdin ends
		_ = server.Wait()
	})
	c := &lineClient{in: in, out: bufio.NewReader(out)}
	c.request(b, "initialize", map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "bench", "version": "1"},
	})
	c.write(b, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return c
}

// call calls tool and fails b on any error, the tool's included.
func (c *lineClient) call(b *testing.B, tool string, in map[string]any) {
	b.Helper()
	c.request(b, "tools/call", map[string]any{"name": tool, "arguments": in})
}

func (c *lineClient) request(b *testing.B, method string, params any) {
	b.Helper()
	c.id++
	c.write(b, map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params})
	for {
		line, err := c.out.ReadBytes('\n')
		if err != nil {
			b.Fatalf("%s: the server's answer: %v", method, err)
		}
		var answer struct { // an error answer has no result
			ID     *int
			Result *struct{ IsError bool }
		}
		check(b, json.Unmarshal(line, &answer))
		if answer.ID == nil || *answer.ID != c.id {
			continue // a notification
		}
		if answer.Result == nil || answer.Result.IsError {
			b.Fatalf("%s: %s", method, line)
		}
		return
	}
}

func (c *lineClient) write(b *testing.B, msg map[string]any) {
	b.Helper()
	if _, err := c.in.Write(append(mustJSON(b, msg), '\n')); err != nil {
		b.Fatalf("writing to the server: %v", err)
	}
}

// mcpPipeClient serves server on one end of two pipes and returns a client
// session connected to the other; both end with the benchmark.
func mcpPipeClient(b *testing.B, server *mcp.Server) *mcp.ClientSession {
	b.Helper()
	toServer, fromClient, err := os.Pipe()
	check(b, err)
	toClient, fromServer, err := os.Pipe()
	check(b, err)
	ss, err := server.Connect(context.Background(), &mcp.IOTransport{Reader: toServer, Writer: fromServer}, nil)
	check(b, err)
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.IOTransport{Reader: toClient, Writer: fromClient}, nil)
	check(b, err)
	b.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

// callMCP calls tool through cs and fails on any error, the tool's included.
func callMCP(b *testing.B, cs *mcp.ClientSession, tool string, in map[string]any) {
	b.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: in})
	if err != nil {
		b.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		b.Fatalf("%s: %+v", tool, res.Content)
	}
}

// BenchmarkMCPSDK is what the MCP SDK alone adds to a tool call, side by
// side in one run: a tool that does work through an MCP client and server
// on pipes (ours) and the same work called directly ("direct"). Row
// work=none returns at once; row work=true runs /bin/true, a handler that
// waits on another process, as every tool here does.
func BenchmarkMCPSDK(b *testing.B) {
	for _, row := range []struct {
		name string
		work func()
	}{
		{"none", func() {}},
		{"true", func() { check(b, exec.Command("/bin/true").Run()) }},
	} {
		b.Run("work="+row.name, func(b *testing.B) {
			server := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
			server.AddTool(&mcp.Tool{Name: "work", InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					row.work()
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
				})
			cs := mcpPipeClient(b, server)
			s := newSideBySide(b)
			for b.Loop() {
				s.round(
					variant{"ours", func() { callMCP(b, cs, "work", map[string]any{}) }},
					variant{"direct", row.work},
				)
			}
			s.report()
		})
	}
}
