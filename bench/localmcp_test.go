package bench

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/mcpserver"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// BenchmarkLocalMCP is a tool call through MCP on the local backend, side
// by side in one run: an MCP client calling the tool on mcpserver over a
// pair of pipes, newline-delimited JSON-RPC as a client talks to
// `oma-sandbox mcp` on its stdio (ours), the same call through the
// library (tools.Toolbox.Call, "library") on the same session, and the
// floor (a fresh minimal bubblewrap sandbox running true). Both sides
// reach the session's resident sandbox.
func BenchmarkLocalMCP(b *testing.B) {
	floor := bwrapFloor(b)
	ctx := context.Background()
	sess, err := local.Create(ctx, local.Options{StateDir: b.TempDir(), WorkspaceID: "bench", SessionID: "mcp", AgentFile: agenttest.AgentBinary(b)})
	if err != nil {
		b.Skipf("the local backend cannot run here: %v", err)
	}
	b.Cleanup(func() { _ = sess.Close(ctx) })
	mustShell(b, sess, fixtureScript)
	lib := tools.New(sess, tools.Options{})
	cs := mcpPipeClient(b, mcpserver.NewServer(mcpserver.Options{Toolbox: tools.New(sess, tools.Options{})}))

	ws := sess.Paths().Workspace
	var mcpFlip, libFlip bool
	edit := func(flip *bool, path string) map[string]any {
		*flip = !*flip
		if *flip {
			return map[string]any{"path": path, "oldText": "alpha", "newText": "omega"}
		}
		return map[string]any{"path": path, "oldText": "omega", "newText": "alpha"}
	}
	content := "written by the benchmark\n"
	rows := []struct {
		tool         string
		mcpIn, libIn func() map[string]any
	}{
		{"read", fixed(map[string]any{"path": "bench/read.txt"}), fixed(map[string]any{"path": "bench/read.txt"})},
		{"write", fixed(map[string]any{"path": "bench/out/mcp.txt", "content": content}), fixed(map[string]any{"path": "bench/out/lib.txt", "content": content})},
		{"edit", func() map[string]any { return edit(&mcpFlip, "bench/edit-ours.txt") }, func() map[string]any { return edit(&libFlip, "bench/edit-seed.txt") }},
		{"ls", fixed(map[string]any{"path": "bench/sub"}), fixed(map[string]any{"path": "bench/sub"})},
		{"glob", fixed(map[string]any{"pattern": "sub/*.txt", "path": "bench"}), fixed(map[string]any{"pattern": "sub/*.txt", "path": "bench"})},
		{"grep", fixed(map[string]any{"pattern": "needle", "path": ws + "/bench"}), fixed(map[string]any{"pattern": "needle", "path": ws + "/bench"})},
		{"bash", fixed(map[string]any{"command": "echo hello"}), fixed(map[string]any{"command": "echo hello"})},
	}
	for _, row := range rows {
		b.Run("tool="+row.tool, func(b *testing.B) {
			s := newSideBySide(b)
			for b.Loop() {
				s.round(
					variant{"ours", func() { callMCP(b, cs, row.tool, row.mcpIn()) }},
					variant{"library", func() { call(b, lib, row.tool, row.libIn()) }},
					variant{"floor", func() { check(b, floor()) }},
				)
			}
			s.report()
		})
	}
	b.Logf("resident sandbox calls: %d", sess.Served().Resident)
}

func fixed(in map[string]any) func() map[string]any { return func() map[string]any { return in } }

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
