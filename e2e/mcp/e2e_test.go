// Package mcp_test runs the MCP end-to-end test (run.sh) under go test, so
// that `go test ./...` covers it wherever node and npm are installed.
package mcp_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestTypeScriptClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and installs the npm client")
	}
	requireNode(t)
	out, err := exec.Command("./run.sh").CombinedOutput()
	t.Logf("run.sh:\n%s", out)
	if err != nil {
		t.Fatalf("run.sh: %v", err)
	}
}

// requireNode checks the node and npm that run.sh will use. Without them
// the test is skipped, except in CI (CI set), where it fails: CI must run it.
func requireNode(t *testing.T) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...) + "; scripts/deps.sh installs what is needed"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	min, err := minNodeMajor("package.json")
	if err != nil {
		t.Fatal(err)
	}
	node, err := nodePath()
	if err != nil {
		missing("the MCP end-to-end test needs node: %v", err)
	}
	if err := checkNode(node, min); err != nil {
		missing("the MCP end-to-end test: %v", err)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		missing("the MCP end-to-end test needs npm: %v", err)
	}
}

// nodePath is the node run.sh runs: the checkout's .tools/node/bin/node
// (installed by scripts/deps.sh when the system's is too old), else PATH's.
func nodePath() (string, error) {
	local, err := filepath.Abs("../../.tools/node/bin/node")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(local); err == nil {
		return local, nil
	}
	return exec.LookPath("node")
}

// minNodeMajor reads the major version of package.json's engines.node
// (">=N"), so the check and the declaration cannot drift apart.
func minNodeMajor(packageJSON string) (int, error) {
	data, err := os.ReadFile(packageJSON)
	if err != nil {
		return 0, err
	}
	var pkg struct {
		Engines struct{ Node string } `json:"engines"`
	}
	if err := json.Unmarshal(data, &pkg); err != nil {
		return 0, fmt.Errorf("%s: %w", packageJSON, err)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(pkg.Engines.Node, ">="))
	if err != nil {
		return 0, fmt.Errorf("%s: engines.node %q is not of the form >=N", packageJSON, pkg.Engines.Node)
	}
	return n, nil
}

// checkNode runs `node --version` and refuses a major version below min.
func checkNode(node string, min int) error {
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", node, err)
	}
	version := strings.TrimSpace(string(out))
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return fmt.Errorf("%s --version printed %q, not vN.N.N", node, version)
	}
	if n < min {
		return fmt.Errorf("%s is node %s, older than the %d that package.json requires", node, version, min)
	}
	return nil
}

func TestCheckNode(t *testing.T) {
	fake := func(version string) string {
		p := filepath.Join(t.TempDir(), "node")
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+version+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		version string
		want    string // "" means accepted
	}{
		{"v18.19.0", "is node v18.19.0, older than the 20 that package.json requires"},
		{"v20.0.0", ""},
		{"v22.11.0", ""},
		{"garbage", `printed "garbage", not vN.N.N`},
	} {
		err := checkNode(fake(tc.version), 20)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.version, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error containing %q", tc.version, err, tc.want)
		}
	}
	if min, err := minNodeMajor("package.json"); err != nil || min != 20 {
		t.Errorf("package.json: min %d, %v", min, err)
	}
}
