//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCreateCopyFile: --copy-file places a private copy of the host file
// in the guest, root-owned with the source's mode, under a volume mount
// that covers it as it covers msb's rootfs; later changes to the host file
// do not reach the guest; inspect shows the patch as msb does; remove
// deletes the copy.
func TestCreateCopyFile(t *testing.T) {
	f := newFx(t)
	f.guestImage = true
	src := filepath.Join(t.TempDir(), "agent")
	require.NoError(t, os.WriteFile(src, []byte("#!/bin/sh\necho agent \"$@\"\n"), 0o750))
	f.ok("create", "alpine", "-n", "box", "-q", "--mount-named", "vol:/workspace",
		"--copy-file", src+":/.oma-sandbox/agent", "--copy-file", src+":/workspace/hidden")
	require.NoError(t, os.WriteFile(src, []byte("changed"), 0o750))

	assert.Equal(t, result{"agent serve\n", "", 0}, f.run("exec", "--user", "0", "box", "--", "/.oma-sandbox/agent", "serve"))
	assert.Equal(t, result{"0:0 750\n", "", 0}, f.run("exec", "--user", "0", "box", "--", "stat", "-c", "%u:%g %a", "/.oma-sandbox/agent"))
	// Root's: the image's user can neither run nor replace it; the guest's
	// root may rename another file over it, as over any file of msb's
	// rootfs (an agent installing a newer one does).
	r := f.run("exec", "box", "--", "sh", "-c", "/.oma-sandbox/agent || echo denied; echo x > /.oma-sandbox/agent || echo refused; mv /.oma-sandbox/agent /tmp/a || echo kept")
	assert.Contains(t, r.stdout, "denied\n")
	assert.Contains(t, r.stdout, "refused\n")
	assert.Contains(t, r.stdout, "kept\n")
	r = f.run("exec", "--user", "0", "box", "--", "sh", "-c", "printf '#!/bin/sh\\necho newer\\n' >/.oma-sandbox/agent.new && chmod 750 /.oma-sandbox/agent.new && mv /.oma-sandbox/agent.new /.oma-sandbox/agent && /.oma-sandbox/agent")
	assert.Equal(t, result{"newer\n", "", 0}, r)
	assert.Equal(t, result{"", "", 1}, f.run("exec", "box", "--", "test", "-e", "/workspace/hidden"))
	assert.NoFileExists(t, filepath.Join(f.home, "volumes", "vol", "hidden"), "the covered copy reached the volume")

	var doc struct {
		Config struct {
			Patches []map[string]map[string]any `json:"patches"`
			Runtime struct {
				User string `json:"user"`
			} `json:"runtime"`
		} `json:"config"`
	}
	require.NoError(t, json.Unmarshal([]byte(f.ok("inspect", "box", "--format", "json").stdout), &doc))
	assert.Equal(t, "65534:65534", doc.Config.Runtime.User)
	require.Len(t, doc.Config.Patches, 2)
	assert.Equal(t, map[string]any{"src": src, "dst": "/.oma-sandbox/agent", "mode": nil, "replace": false}, doc.Config.Patches[0]["CopyFile"])

	// A stop and start place the copy again (fakemsb's root is a tmpfs).
	f.ok("stop", "box", "-q")
	f.ok("start", "box", "-q")
	assert.Equal(t, result{"agent serve\n", "", 0}, f.run("exec", "--user", "0", "box", "--", "/.oma-sandbox/agent", "serve"))

	f.ok("remove", "--force", "box", "-q")
	assert.NoDirExists(t, filepath.Join(f.home, "patches", "box"))
}

// TestCreateCopyFileRefusals: what fakemsb cannot place as msb would is
// refused before anything is made.
func TestCreateCopyFileRefusals(t *testing.T) {
	f := newFx(t)
	src := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(src, []byte("x"), 0o644))
	for _, dst := range []string{"/etc/passwd", "/usr/bin/x", "/", "/a/../etc/x"} {
		r := f.run("create", "alpine", "-n", "box", "-q", "--copy-file", src+":"+dst)
		assert.Equal(t, 1, r.code, dst)
		assert.Contains(t, r.stderr, "error: --copy-file: cannot place", dst)
	}
	assert.Equal(t, result{"", "error: sandbox not found: box\n", 1}, f.run("inspect", "box", "--format", "json"))
}
