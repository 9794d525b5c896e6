package mcpserver

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// A session removed under a server (`session rm` from another process, or
// the reaper) is reported as gone by every tool, glob included, and the
// server does not turn it into a poisoned session.
func TestRemovedSessionIsGone(t *testing.T) {
	ctx := context.Background()
	backends := map[string]func(t *testing.T) (served, remover session.Session){
		"msb": func(t *testing.T) (session.Session, session.Session) {
			env, s := msbSession(t)
			other, err := microvm.Attach(msb.NewClient(&msb.CLI{Path: env.Bin}), "", s.Name())
			require.NoError(t, err)
			return s, other
		},
		"local": func(t *testing.T) (session.Session, session.Session) {
			dir := t.TempDir()
			s, err := local.Create(ctx, local.Options{StateDir: dir, WorkspaceID: "ws-gone", SessionID: "s"})
			if err != nil {
				t.Skipf("no local sandbox on this host: %v", err)
			}
			other, err := local.Attach(ctx, dir, s.Name())
			require.NoError(t, err)
			return s, other
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			s, other := open(t)
			c := connect(t, NewServer(Options{Toolbox: tools.New(s, tools.Options{})}))
			c.mustCall(t, "write", obj{"path": "a.txt", "content": "x"})
			require.NoError(t, other.Close(ctx), "session rm from another process")

			for _, call := range []struct {
				tool string
				args obj
			}{
				{"glob", obj{"pattern": "*"}},
				{"glob", obj{"pattern": "*"}},
				{"grep", obj{"pattern": "x", "path": s.Paths().Workspace}},
				{"bash", obj{"command": "ls"}},
				{"read", obj{"path": "a.txt"}},
				{"write", obj{"path": "b.txt", "content": "y"}},
				{"ls", obj{}},
			} {
				text, isError := c.call(t, call.tool, call.args)
				assert.True(t, isError, call.tool)
				assert.Contains(t, text, session.ErrGone.Error(), call.tool)
				assert.False(t, strings.Contains(text, "poisoned") || strings.Contains(text, "readiness"), "%s: %s", call.tool, text)
			}
			assert.False(t, s.Poisoned(), "a vanished session is not poisoned")
			require.NoError(t, s.Close(ctx), "closing a gone session succeeds")
		})
	}
}
