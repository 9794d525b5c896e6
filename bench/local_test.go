package bench

import (
	"context"
	"os/exec"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// BenchmarkLocal is the local backend's cost per tool call: each call's
// script in a fresh bubblewrap sandbox, side by side with the same tool
// running the same script directly with the host's bash (no isolation at
// all: internal/sessiontest.Host).
func BenchmarkLocal(b *testing.B) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skipf("the local backend needs bwrap: %v", err)
	}
	ctx := context.Background()
	sess, err := local.Create(ctx, local.Options{StateDir: b.TempDir(), WorkspaceID: "bench", SessionID: "local"})
	if err != nil {
		b.Skipf("the local backend cannot run here: %v", err)
	}
	b.Cleanup(func() { _ = sess.Close(ctx) })
	host := sessiontest.NewHost(b)
	mustShell(b, sess, fixtureScript)
	mustShell(b, host, fixtureScript)
	ours, bare := tools.New(sess, tools.Options{}), tools.New(host, tools.Options{})
	hostRows := toolRows(host.Paths().Workspace)
	for i, row := range toolRows(sess.Paths().Workspace) {
		b.Run("tool="+row.name, func(b *testing.B) {
			s := newSideBySide(b)
			for b.Loop() {
				s.round(
					variant{"ours", func() { row.ours(b, ours) }},
					variant{"host", func() { hostRows[i].ours(b, bare) }},
				)
			}
			s.report()
		})
	}
}
