package bench

import (
	"context"
	"os/exec"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// BenchmarkLocal is the local backend's cost per tool call, side by side
// in one run: a frame to the guest agent in the session's resident sandbox
// (ours; where the host cannot start one, a sandbox per call), the agent's
// builtin in a fresh bubblewrap sandbox per call ("per-call"), the same
// call as its bash script ("scripts", a session without the agent), the
// floor (a fresh minimal bubblewrap sandbox running true) and the same tool
// with the host's bash and no isolation at all ("host":
// internal/sessiontest.Host).
func BenchmarkLocal(b *testing.B) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skipf("the local backend needs bwrap: %v", err)
	}
	ctx := context.Background()
	open := func(id string, noAgent, perCall bool) *local.Session {
		sess, err := local.Create(ctx, local.Options{StateDir: b.TempDir(), WorkspaceID: "bench", SessionID: id,
			AgentFile: agenttest.AgentBinary(b), NoAgent: noAgent, SandboxPerCall: perCall})
		if err != nil {
			b.Skipf("the local backend cannot run here: %v", err)
		}
		b.Cleanup(func() { _ = sess.Close(ctx) })
		mustShell(b, sess, fixtureScript)
		return sess
	}
	sess, perCallSess, scriptSess := open("local", false, false), open("percall", false, true), open("scripts", true, true)
	host := sessiontest.NewHost(b)
	mustShell(b, host, fixtureScript)
	ours, perCall := tools.New(sess, tools.Options{}), tools.New(perCallSess, tools.Options{})
	scripts, bare := tools.New(scriptSess, tools.Options{}), tools.New(host, tools.Options{})
	floorArgv := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "/usr/bin/true"}
	// Each session keeps its own edit flips.
	hostRows := toolRows(host.Paths().Workspace)
	perCallRows, scriptRows := toolRows(sess.Paths().Workspace), toolRows(sess.Paths().Workspace)
	for i, row := range toolRows(sess.Paths().Workspace) {
		b.Run("tool="+row.name, func(b *testing.B) {
			s := newSideBySide(b)
			for b.Loop() {
				s.round(
					variant{"ours", func() { row.ours(b, ours) }},
					variant{"per-call", func() { perCallRows[i].ours(b, perCall) }},
					variant{"scripts", func() { scriptRows[i].ours(b, scripts) }},
					variant{"floor", func() { check(b, exec.Command(bwrap, floorArgv...).Run()) }},
					variant{"host", func() { hostRows[i].ours(b, bare) }},
				)
			}
			s.report()
		})
	}
	for _, s := range []*local.Session{sess, perCallSess} {
		if n := s.Served(); n.ScriptFallbacks != 0 {
			b.Fatalf("the agent's session ran scripts for builtins: %+v", n)
		}
	}
	b.Logf("resident sandbox calls: %d of ours", sess.Served().Resident)
}
