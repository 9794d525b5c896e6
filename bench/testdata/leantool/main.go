// Command leantool makes one tool call as `oma-sandbox tool` does, linking
// only what that call needs (the library, not the MCP server nor the
// OpenTelemetry SDK the CLI also links): BenchmarkLocalCLI's "lean" row,
// what the CLI's start would be without them.
//
// Usage: leantool STATE_DIR NAME TOOL JSON
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: leantool STATE_DIR NAME TOOL JSON")
		os.Exit(2)
	}
	ctx := context.Background()
	s, err := omasandbox.Attach(ctx, os.Args[2], omasandbox.Options{StateDir: os.Args[1], OneExecPerCall: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var opts tools.Options
	if ls, ok := s.Sandbox().(*local.Session); ok {
		opts.BashChain = ls.BashChain()
	}
	text, err := tools.New(s.Sandbox(), opts).Call(ctx, os.Args[3], json.RawMessage(os.Args[4]), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(text)
}
