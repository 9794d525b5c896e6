package omasandbox_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/session/local"
)

const quickstartOut = `read: "const greeting = \"b\"\n\n[1 more lines in file. Use offset=4 to continue.]"
glob: [main.go]
bash: "ok\n" exit 0
output: count.txt "1\n"
`

// buildQuickstart builds testdata/quickstart as a module of its own that
// requires this one through a replace directive: offline, unless the module
// cache lacks part of the module graph.
func buildQuickstart(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a program outside the module")
	}
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "quickstart", "main.go"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644))
	sum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	mod := "module example.com/quickstart\n\ngo 1.26.0\n\nrequire github.com/oma-sandbox/oma-sandbox v0.0.0\n\nreplace github.com/oma-sandbox/oma-sandbox => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	bin := filepath.Join(dir, "quickstart")
	build := func(proxy string) ([]byte, error) {
		cmd := exec.Command("go", "build", "-mod=mod", "-o", bin, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		if proxy != "" {
			cmd.Env = append(cmd.Env, "GOPROXY="+proxy)
		}
		return cmd.CombinedOutput()
	}
	out, err := build("off")
	if err != nil && bytes.Contains(out, []byte("module lookup disabled by GOPROXY=off")) {
		// The build reads the go.mod of every module in the graph, some
		// of which this module's own builds never need (the deps of a
		// dependency older than graph pruning): a fresh module cache
		// fetches those once, go.mod files only.
		out, err = build("")
	}
	require.NoError(t, err, "%s", out)
	return bin
}

func runQuickstart(t *testing.T, bin string, env ...string) string {
	t.Helper()
	dest := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(bin, dest)
	cmd.Env = append(os.Environ(), env...)
	var stderr []byte
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "%s", stderr)
	return string(out)
}

// TestQuickstartOutsideModule runs the quickstart program with Backend
// "auto" where msb is fakemsb (auto picks it) and where msb is missing
// (auto falls back to local), and checks that nothing is left behind.
func TestQuickstartOutsideModule(t *testing.T) {
	bin := buildQuickstart(t)
	stateHome := t.TempDir()

	env := fakemsbtest.New(t)
	out := runQuickstart(t, bin, "OMA_MSB="+env.Bin, "XDG_STATE_HOME="+stateHome)
	assert.Equal(t, "backend: msb\n"+quickstartOut, out)
	assert.Empty(t, env.Sandboxes(t), "no sandbox left")
	assert.Empty(t, env.Volumes(t), "no volume left")

	if reason := localMissing(); reason != "" {
		t.Skip(reason)
	}
	out = runQuickstart(t, bin, "OMA_MSB="+filepath.Join(t.TempDir(), "no-msb"), "XDG_STATE_HOME="+stateHome)
	assert.Equal(t, "backend: local\n"+quickstartOut, out)
	left, err := local.List(filepath.Join(stateHome, "oma-sandbox", "local"))
	require.NoError(t, err)
	assert.Empty(t, left, "no local session left")
}
