package tools

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// linkMaze lays out under root the shapes of symbolic links a hostile guest
// can leave: absolute, relative and upward links, links to files and
// directories, self and mutual loops, chains longer than gnulib's 20 links
// and the kernel's 40, a chain that ends in a loop, dangling links, a link
// whose target lies under itself, and targets with ., .. and //.
func linkMaze(t *testing.T, root string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "a", "f"), []byte("f\n"), 0o644))
	links := map[string]string{
		"abs": root + "/a", "rel": "a", "up": "../", "file": "a/f", "self": "self",
		"loop1": "loop2", "loop2": "loop1", "dangling": "missing/x", "under": "under/x",
		"absself": root + "/absself", "slash": "a/", "dots": "./a//./b/../f", "dot": ".",
		"root": "/", "chainself": "c0/../self", "a/b/back": "../../rel", "a/b/out": "../../../..",
		"dotchain": strings.Repeat("dot/", 25) + "self",
	}
	for i := range 25 { // c0 .. c25: 26 links, then a
		links[fmt.Sprintf("c%d", i)] = fmt.Sprintf("c%d", i+1)
	}
	links["c25"] = "a"
	for i := range 45 { // d0 .. d45: over the kernel's 40
		links[fmt.Sprintf("d%d", i)] = fmt.Sprintf("d%d", i+1)
	}
	links["d45"] = "a/f"
	for i := range 22 { // e0 .. e22, back to e0: a loop met after 20 links
		links[fmt.Sprintf("e%d", i)] = fmt.Sprintf("e%d", i+1)
	}
	links["e22"] = "e0"
	for name, to := range links {
		require.NoError(t, os.Symlink(to, filepath.Join(root, name)))
	}
}

// mazePaths are the paths resolved in the maze: every entry alone, under a
// missing name, followed by .., by . and by a slash, and a few mixes.
func mazePaths(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	paths := []string{root, root + "/", root + "//a/./f", root + "/../..", "/", "//", "/../x", root + "/a/f/x", root + "/a/f/../x",
		root + "/a/b/back/f", root + "/a/b/out", root + "/loop1/../a", root + "/missing/../a/f"}
	for _, e := range entries {
		p := root + "/" + e.Name()
		if e.Name() == "under" { // readlink -m never ends here: one path is enough
			paths = append(paths, p+"/y")
			continue
		}
		paths = append(paths, p, p+"/x", p+"/x/y", p+"/..", p+"/../x", p+"/.", p+"/", p+"/f", p+"/b/../f")
	}
	return paths
}

// The agent's file builtins resolve every path of the maze to what
// readlink -m prints, and fail where readlink -m never ends. A workspace
// no path resolves into makes the cat builtin say each path's resolution
// in its refusal.
func TestBuiltinCanonMatchesReadlink(t *testing.T) {
	root := sharedTempDir(t)
	linkMaze(t, root)
	giveToNobody(t, root)
	ws := filepath.Join(root, "no-workspace")
	const refusal = "Refusing shown: it is a symbolic link (or lies under one) that resolves to "
	for _, p := range mazePaths(t, root) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		out, err := exec.CommandContext(ctx, "readlink", "-zm", "--", p).Output()
		cancel()
		want := "exit 3: Cannot resolve shown\n"
		if err == nil { // else failed, or never ended (under/y)
			want = "exit 10: " + refusal + strings.TrimSuffix(string(out), "\x00") + ", outside " + ws + "; links are followed only inside the workspace\n"
		}
		r := runBuiltin(t, agentwire.BuiltinCat, "", p, ws, "shown")
		require.Empty(t, r.stdout)
		assert.Equal(t, want, fmt.Sprintf("exit %d: %s", r.code, r.stderr), "path %s", p)
	}
}
