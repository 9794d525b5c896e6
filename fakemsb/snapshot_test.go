//go:build linux

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A snapshot of a running sandbox is refused; of a stopped one it carries
// the image and the --copy-file files, which a sandbox booted from it has
// in its guest but not in its config, and keeps after the snapshot is
// removed. inspect prints msb's text.
func TestSnapshotLifecycle(t *testing.T) {
	f := newFx(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	require.NoError(t, os.WriteFile(marker, []byte("root disk\n"), 0o644))
	r := f.run("create", "debian", "--name", "src", "-q", "--copy-file", marker+":/.oma-sandbox/marker", "--label", "k=v")
	require.Equal(t, 0, r.code, r.stderr)

	r = f.run("snapshot", "create", "s1", "--from", "src")
	assert.Equal(t, result{"", "error: snapshot source sandbox 'src' is not stopped\n", 1}, r)
	require.Equal(t, 0, f.run("stop", "src", "-q").code)
	r = f.run("snapshot", "create", "s1", "--from", "src", "--label", "oma=1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}\n`+regexp.QuoteMeta(filepath.Join(f.home, "snapshots", "s1"))+`\n$`, r.stdout)
	assert.Equal(t, "   ✓ Snapshotted  src\n", r.stderr)

	r = f.run("snapshot", "inspect", "s1")
	require.Equal(t, 0, r.code, r.stderr)
	for _, line := range []string{"Image:          debian", "Source Sandbox: src", "Labels:         oma=1", "Path:           " + filepath.Join(f.home, "snapshots", "s1")} {
		assert.Contains(t, r.stdout, line+"\n")
	}

	conf := filepath.Join(dir, "conf.json")
	require.NoError(t, os.WriteFile(conf, []byte(`{"image":{"snapshot":"s1"}}`), 0o600))
	r = f.run("create", "--conf", conf, "--name", "fork", "-q")
	require.Equal(t, 0, r.code, r.stderr)
	r = f.run("inspect", "fork", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"reference": "debian"`)
	assert.Contains(t, r.stdout, `"patches": []`, "the snapshot's files are not the fork's patches")
	assert.NotContains(t, r.stdout, `"k": "v"`, "labels are the create's own")

	require.Equal(t, 0, f.run("snapshot", "remove", "s1", "-q").code)
	require.Equal(t, 0, f.run("remove", "--force", "src", "-q").code)
	r = f.run("exec", "fork", "--", "cat", "/.oma-sandbox/marker")
	assert.Equal(t, result{"root disk\n", "", 0}, r)
	assert.Equal(t, result{"[]\n", "", 0}, f.run("snapshot", "list", "--format", "json"))
	require.Equal(t, 0, f.run("remove", "--force", "fork", "-q").code)
}
