//go:build linux

package guestagent

import (
	"archive/tar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// An extraction killed outright in the middle of a file, as a call run in
// a sandbox of its own is at its deadline, leaves no partial file behind,
// under a temporary name or its own.
func TestExtractKilledMidFileLeavesNothing(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.Chmod(root, 0o755))
	cmd := exec.Command(agenttest.AgentBinary(t), "builtin", agentwire.BuiltinExtract, "skills", root)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	const size = 4 << 20
	tw := tar.NewWriter(stdin)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "big.bin", Mode: 0o644, Size: size, Typeflag: tar.TypeReg}))
	// More than a pipe holds: once written, the agent has read, and
	// written out, most of it.
	chunk := strings.Repeat("x", 1<<20)
	for range 2 {
		_, err := tw.Write([]byte(chunk))
		require.NoError(t, err, stderr.String())
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	var left []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != root {
			left = append(left, strings.TrimPrefix(p, root+"/"))
		}
		return err
	}))
	assert.Empty(t, left, "what a killed extraction left")
}
