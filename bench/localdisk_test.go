package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// BenchmarkLocalWriteDisk is what the file system asks of the write tool,
// side by side in one run: the write tool on a local session through the
// library (ours), the same atomic replace done by this process on the host
// in the session's workspace ("replace": a new file beside the target,
// written, its mode set, renamed over the target, as the agent's write
// builtin does), the same replace in a directory on tmpfs
// ("replace-tmpfs", /dev/shm) and the floor (a fresh minimal bubblewrap
// sandbox running true).
func BenchmarkLocalWriteDisk(b *testing.B) {
	floor := bwrapFloor(b)
	tmpfs, err := os.MkdirTemp("/dev/shm", "oma-bench-")
	if err != nil {
		b.Skipf("no tmpfs at /dev/shm to compare with: %v", err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(tmpfs) })
	ctx := context.Background()
	state := b.TempDir()
	sess, err := local.Create(ctx, local.Options{StateDir: state, WorkspaceID: "bench", SessionID: "disk", AgentFile: agenttest.AgentBinary(b)})
	if err != nil {
		b.Skipf("the local backend cannot run here: %v", err)
	}
	b.Cleanup(func() { _ = sess.Close(ctx) })
	tb := tools.New(sess, tools.Options{})
	content := "written by the benchmark\n"
	call(b, tb, "write", map[string]any{"path": "ours.txt", "content": content})
	onDisk := filepath.Join(state, sess.Name(), "box", "workspace", "replaced.txt")
	onTmpfs := filepath.Join(tmpfs, "replaced.txt")
	for _, target := range []string{onDisk, onTmpfs} {
		check(b, os.WriteFile(target, []byte(content), 0o644))
	}
	s := newSideBySide(b)
	for b.Loop() {
		s.round(
			variant{"ours", func() { call(b, tb, "write", map[string]any{"path": "ours.txt", "content": content}) }},
			variant{"replace", func() { replace(b, onDisk, content) }},
			variant{"replace-tmpfs", func() { replace(b, onTmpfs, content) }},
			variant{"floor", func() { check(b, floor()) }},
		)
	}
	s.report()
}

// replace writes content over target atomically: a new file beside it,
// renamed over it.
func replace(b *testing.B, target, content string) {
	f, err := os.CreateTemp(filepath.Dir(target), ".replace-*")
	check(b, err)
	_, err = f.WriteString(content)
	check(b, err)
	check(b, f.Chmod(0o644))
	check(b, f.Close())
	check(b, os.Rename(f.Name(), target))
}
