// Package mcp_test runs the MCP end-to-end test (run.sh) under go test, so
// that `go test ./...` covers it wherever node and npm are installed.
package mcp_test

import (
	"os/exec"
	"testing"
)

func TestTypeScriptClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and installs the npm client")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the MCP end-to-end test needs %s: %v", tool, err)
		}
	}
	out, err := exec.Command("./run.sh").CombinedOutput()
	t.Logf("run.sh:\n%s", out)
	if err != nil {
		t.Fatalf("run.sh: %v", err)
	}
}
