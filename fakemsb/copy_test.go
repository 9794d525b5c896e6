//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCopyBothWays(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q", "--mount-named", "vol:/workspace", "--tmpfs", "/mnt/up:8M")
	host := t.TempDir()

	// A file into an existing directory, and to an explicit name.
	require.NoError(t, os.WriteFile(filepath.Join(host, "a.txt"), []byte("alpha"), 0o640))
	f.ok("copy", filepath.Join(host, "a.txt"), "box:/workspace")
	f.ok("cp", "-q", filepath.Join(host, "a.txt"), "box:/mnt/up/renamed.txt")
	assert.Equal(t, "alpha|alpha|640\n", f.ok("exec", "box", "--", "sh", "-c",
		`printf '%s|%s|%s\n' "$(cat /workspace/a.txt)" "$(cat /mnt/up/renamed.txt)" "$(stat -c %a /workspace/a.txt)"`).stdout)

	// A directory tree, recursively, with a symlink kept as a symlink.
	tree := filepath.Join(host, "tree")
	require.NoError(t, os.MkdirAll(filepath.Join(tree, "sub", "deeper"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "sub", "deeper", "f"), []byte("deep"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "top"), []byte("top"), 0o755))
	require.NoError(t, os.Symlink("top", filepath.Join(tree, "link")))
	f.ok("copy", tree, "box:/mnt/up")
	assert.Equal(t, "deep top top\n", f.ok("exec", "box", "--", "sh", "-c",
		`echo $(cat /mnt/up/tree/sub/deeper/f) $(cat /mnt/up/tree/top) $(readlink /mnt/up/tree/link)`).stdout)

	// Out of the guest: a file and a directory, from a tmpfs and a volume.
	f.ok("exec", "box", "--", "sh", "-c", "mkdir -p /workspace/out/d && echo one > /workspace/out/1 && echo two > /workspace/out/d/2 && ln -s 1 /workspace/out/l")
	dst := t.TempDir()
	f.ok("copy", "box:/mnt/up/tree/top", filepath.Join(dst, "top-copy"))
	f.ok("copy", "box:/workspace/out", dst)
	b, err := os.ReadFile(filepath.Join(dst, "top-copy"))
	require.NoError(t, err)
	assert.Equal(t, "top", string(b))
	b, err = os.ReadFile(filepath.Join(dst, "out", "d", "2"))
	require.NoError(t, err)
	assert.Equal(t, "two\n", string(b))
	l, err := os.Readlink(filepath.Join(dst, "out", "l"))
	require.NoError(t, err)
	assert.Equal(t, "1", l)

	// A host path containing ':' needs "./".
	colon := filepath.Join(dst, "x:y")
	require.NoError(t, os.WriteFile(colon, []byte("colon"), 0o644))
	cmd := f.cmd("copy", "./x:y", "box:/workspace/colon")
	cmd.Dir = dst
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Equal(t, "colon", f.ok("exec", "box", "--", "cat", "/workspace/colon").stdout)

	// Missing paths on either side.
	r := f.run("copy", "box:/nope", filepath.Join(dst, "n"))
	assert.Equal(t, result{"", "error: stat /nope\n", 1}, r)
	r = f.run("copy", filepath.Join(dst, "missing"), "box:/workspace/")
	assert.Equal(t, result{"", "error: io error: No such file or directory (os error 2)\n", 1}, r)
	r = f.run("copy", filepath.Join(host, "a.txt"), "box:/usr/a.txt")
	assert.Equal(t, result{"", "error: sandbox fs error: /usr/a.txt: read-only file system\n", 1}, r)
}

func TestCopyNeverFollowsGuestSymlinksToHost(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q", "--mount-named", "vol:/workspace")
	host := t.TempDir()
	secret := filepath.Join(host, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("host secret"), 0o644))
	victim := filepath.Join(host, "victim")
	require.NoError(t, os.Mkdir(victim, 0o755))
	src := filepath.Join(host, "payload")
	require.NoError(t, os.WriteFile(src, []byte("payload"), 0o644))

	// Guest symlinks that name host paths, directly and through "..".
	f.ok("exec", "box", "--", "sh", "-c", "ln -s "+secret+" /workspace/s1; ln -s ../../../../../.."+secret+" /workspace/s2; "+
		"ln -s "+victim+" /workspace/dir; ln -s /proc/1/root/.. /workspace/magic; mkdir /workspace/tree; ln -s "+secret+" /workspace/tree/inner")

	for _, p := range []string{"/workspace/s1", "/workspace/s2"} {
		r := f.run("copy", "box:"+p, filepath.Join(host, "out"))
		assert.Equal(t, 1, r.code, p)
		_, err := os.Stat(filepath.Join(host, "out"))
		assert.True(t, os.IsNotExist(err), "%s must not copy the host file", p)
	}
	r := f.run("copy", src, "box:/workspace/dir/planted")
	assert.Equal(t, 1, r.code)
	_, err := os.Stat(filepath.Join(victim, "planted"))
	assert.True(t, os.IsNotExist(err), "copy-in must not write through a guest symlink to the host")
	r = f.run("copy", src, "box:/workspace/magic/planted")
	assert.Equal(t, 1, r.code)

	// Inside a copied directory a symlink stays a symlink.
	dst := t.TempDir()
	f.ok("copy", "box:/workspace/tree", dst)
	l, err := os.Readlink(filepath.Join(dst, "tree", "inner"))
	require.NoError(t, err)
	assert.Equal(t, secret, l)

	// A guest symlink that stays inside the guest is followed there.
	f.ok("exec", "box", "--", "sh", "-c", "echo in-guest > /tmp/g; ln -s /tmp/g /workspace/ok")
	f.ok("copy", "box:/workspace/ok", filepath.Join(dst, "ok"))
	b, err := os.ReadFile(filepath.Join(dst, "ok"))
	require.NoError(t, err)
	assert.Equal(t, "in-guest\n", string(b))
}

func TestCopyIntoStoppedSandbox(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q", "--mount-named", "vol:/workspace")
	f.ok("stop", "-q", "box")
	src := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(src, []byte("kept"), 0o644))
	f.ok("copy", src, "box:/workspace/f")
	assert.Equal(t, statusStopped, f.state().Sandboxes["box"].Status)
	assert.Empty(t, holderProcs(f.home+"|"))
	assert.Equal(t, "kept", f.ok("exec", "box", "--", "cat", "/workspace/f").stdout)
}
