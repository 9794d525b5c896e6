//go:build linux

package realmsb_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/reaper"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// foreignVolume is not ours: the reaper must leave it alone.
const foreignVolume = "e2e-foreign-volume"

// lifecycle: a session on the default image, every tool, an upload, the
// outputs, close; then a session left behind as by a dead process, which
// the reaper removes. Afterwards msb lists nothing of ours.
func lifecycle(t *testing.T, tg target) {
	ctx := context.Background()
	client := tg.client
	require.NoError(t, client.VolumeCreate(ctx, msb.VolumeCreateOptions{Name: foreignVolume}))
	// Removed below once the reaper has left it; here too, so that a
	// failure before that does not leave it to the next test's listing.
	t.Cleanup(func() { _ = client.VolumeRemove(context.WithoutCancel(ctx), foreignVolume) })

	s, err := microvm.Create(ctx, tg.options("lifecycle"))
	require.NoError(t, err, "create a session on %s", microvm.DefaultImage)
	t.Cleanup(func() { _ = s.Close(context.WithoutCancel(ctx)) })
	tb := tools.New(s, tools.Options{})
	call := func(name string, input any) string {
		t.Helper()
		raw, err := json.Marshal(input)
		require.NoError(t, err)
		out, err := tb.Call(ctx, name, raw, nil)
		require.NoError(t, err, "%s %s", name, raw)
		return out
	}
	type obj = map[string]any

	require.Equal(t, "Successfully wrote 11 bytes to src/main.txt",
		call("write", obj{"path": "src/main.txt", "content": "alpha\nbeta\n"}))
	require.Equal(t, "Successfully replaced 1 block(s) in src/main.txt.",
		call("edit", obj{"path": "src/main.txt", "edits": []obj{{"oldText": "beta", "newText": "gamma"}}}))
	require.Equal(t, "alpha\ngamma\n", call("read", obj{"path": "/workspace/src/main.txt"}))
	require.Contains(t, strings.Split(call("ls", obj{}), "\n"), "src/")
	require.Equal(t, "src/main.txt", call("glob", obj{"pattern": "*.txt"}))
	require.Equal(t, "/workspace/src/main.txt", call("grep", obj{"pattern": "gam+a", "path": "/workspace"}))
	// The image's agent user, in the workspace, with the image's tools.
	require.Equal(t, "65534\n/workspace\n2 src/main.txt\n",
		call("bash", obj{"command": "id -u && pwd && wc -l src/main.txt && rg --version >/dev/null"}))

	// An upload lands read-only under the uploads root; the tools read it.
	note := "uploaded by the host\n"
	sum := sha256.Sum256([]byte(note))
	uploads := s.Paths().Uploads
	require.NoError(t, transfer.Materialize(ctx, s, []transfer.Mount{{
		Kind: transfer.Upload, Path: uploads + "/in/note.txt", Size: int64(len(note)),
		SHA256: hex.EncodeToString(sum[:]), Content: strings.NewReader(note),
	}}))
	require.Equal(t, note, call("read", obj{"path": uploads + "/in/note.txt"}))
	require.Equal(t, uploads+"/in/note.txt", call("grep", obj{"pattern": "host", "path": uploads}))

	// What the agent leaves in the outputs comes back to the host.
	out := s.Paths().Outputs
	call("bash", obj{"command": "mkdir -p " + out + "/report && cp " + uploads + "/in/note.txt " + out + "/report/ && printf done >" + out + "/status.txt"})
	dest := t.TempDir()
	res, err := transfer.Collect(ctx, s, dest, transfer.CollectOptions{})
	require.NoError(t, err)
	require.False(t, res.Partial, "refused %v, %d unlisted", res.Refused, res.Unlisted)
	var collected []string
	for _, f := range res.Files {
		collected = append(collected, f.Path)
	}
	slices.Sort(collected)
	require.Equal(t, []string{"report/note.txt", "status.txt"}, collected)
	requireFile(t, filepath.Join(dest, "report", "note.txt"), note)
	requireFile(t, filepath.Join(dest, "status.txt"), "done")

	require.NoError(t, s.Close(ctx))
	requireLeft(t, client, nil, []string{foreignVolume})

	// A session whose process died: nobody closes it. The reaper, with a
	// clock an hour ahead, removes its sandbox and volume and nothing else.
	abandoned, err := microvm.Create(ctx, tg.options("abandoned"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = abandoned.Close(context.WithoutCancel(ctx)) })
	rep, err := reaper.Reap(ctx, client, reaper.Options{
		OlderThan: time.Minute,
		Now:       func() time.Time { return time.Now().Add(time.Hour) },
	})
	require.NoError(t, err)
	require.Equal(t, []string{abandoned.Name()}, rep.RemovedSandboxes)
	require.Equal(t, []string{abandoned.Names().Volume}, rep.RemovedVolumes)
	requireLeft(t, client, nil, []string{foreignVolume})
	_, err = abandoned.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{})
	require.ErrorIs(t, err, session.ErrGone, "a reaped session's next call")

	require.NoError(t, client.VolumeRemove(ctx, foreignVolume))
	requireLeft(t, client, nil, nil)
}

// requireLeft checks msb's own listings: exactly these sandboxes and volumes.
func requireLeft(t *testing.T, client *msb.Client, sandboxes, volumes []string) {
	t.Helper()
	ctx := context.Background()
	listed, err := client.List(ctx, msb.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, sb := range listed {
		names = append(names, sb.Name+" ("+sb.Status+")")
	}
	require.ElementsMatch(t, sandboxes, names, "sandboxes msb lists")
	vols, err := client.VolumeList(ctx)
	require.NoError(t, err)
	names = nil
	for _, v := range vols {
		names = append(names, v.Name)
	}
	require.ElementsMatch(t, volumes, names, "volumes msb lists")
}

func requireFile(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, want, string(got), path)
}
