//go:build linux

package guestagent

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// install renames a copy staged beside the agent's path (PATH.SUFFIX)
// over it, and nothing else: every other pair is refused, naming it, and
// changes nothing.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent")
	staged := path + ".new-1"
	write := func(p, body string) {
		t.Helper()
		require.NoError(t, os.WriteFile(p, []byte(body), 0o500))
	}
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return string(b)
	}
	write(path, "older")
	write(staged, "newer")
	write(path+".new-fresh", "another host's")
	other := filepath.Join(t.TempDir(), "agent.new-2")
	write(other, "elsewhere")
	require.NoError(t, os.Mkdir(path+".dir", 0o700))
	require.NoError(t, os.Symlink(other, path+".link"))

	for _, c := range []struct{ staged, path, want string }{
		{other, path, "is not a copy staged beside"},
		{filepath.Join(dir, "other.new-1"), path, "is not a copy staged beside"},
		{path, path, "is not a copy staged beside"},
		{dir + "/./agent.new-1", path, "is not a copy staged beside"},
		{staged, "agent", "is not a copy staged beside"},
		{path + ".dir", path, "is not a regular file"},
		{path + ".link", path, "is not a regular file"},
		{path + ".missing", path, "no such file"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main([]string{"install", c.staged, c.path}, strings.NewReader(""), &stdout, &stderr)
		assert.Equal(t, 1, code, "%s %s", c.staged, c.path)
		assert.Contains(t, stderr.String(), c.want, "%s %s", c.staged, c.path)
		assert.Equal(t, "older", read(path), "%s %s", c.staged, c.path)
	}
	assert.Equal(t, "elsewhere", read(other))

	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, Main([]string{"install", staged, path}, strings.NewReader(""), &stdout, &stderr), stderr.String())
	assert.Equal(t, "newer", read(path))
	assert.NoFileExists(t, staged)
	assert.FileExists(t, path+".new-fresh", "a copy another host may be about to install stays")
}

// An install removes the copies staged beside the agent that a replacement
// cut short left (those that changed before the time it is given), and
// nothing else.
func TestInstallRemovesAbandonedCopies(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent")
	for _, name := range []string{"agent", "agent.new-staged", "agent.new-cut-short", "agent.old", "other.new-1"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(name), 0o500))
	}
	require.NoError(t, os.Mkdir(path+".new-dir", 0o700))
	require.NoError(t, os.Symlink(filepath.Join(dir, "agent.old"), path+".new-link"))
	time.Sleep(50 * time.Millisecond) // past the file system's clock tick
	before := time.Now()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, os.WriteFile(path+".new-fresh", []byte("fresh"), 0o500))

	require.NoError(t, install(path+".new-staged", path, before))
	var left []string
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	assert.Equal(t, []string{"agent", "agent.new-dir", "agent.new-fresh", "agent.new-link", "agent.old", "other.new-1"}, left)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "agent.new-staged", string(b))
}

// `builtin --revision=N` runs the builtin for a host of revision N or
// lower, and refuses, with the one line a host knows, for a higher one.
func TestBuiltinRevisionOption(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), nil, 0o644))
	agent := agenttest.AgentBinary(t)
	run := func(option string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(agent, "builtin", option, agentwire.BuiltinLs, dir, ".")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	for _, n := range []int{0, agentwire.Revision} {
		code, stdout, stderr := run("--revision=" + strconv.Itoa(n))
		assert.Equal(t, 0, code, "%d: %s", n, stderr)
		assert.Contains(t, stdout, "a.txt")
	}
	code, stdout, stderr := run("--revision=" + strconv.Itoa(agentwire.Revision+1))
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Equal(t, agentwire.OlderThanRevision(agentwire.Revision+1), stderr)
	for _, bad := range []string{"--revision=", "--revision=x", "--revision=-1"} {
		code, _, stderr := run(bad)
		assert.Equal(t, 2, code, bad)
		assert.Contains(t, stderr, "want a revision number", bad)
	}
}
