package tools

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

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
