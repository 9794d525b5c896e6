package reaper

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// TestReapFakemsb runs a sweep through the real msb runner against fakemsb.
func TestReapFakemsb(t *testing.T) {
	env := fakemsbtest.New(t)
	client := msb.NewClient(&msb.CLI{Path: env.Bin})
	ctx := t.Context()
	wall := time.Now()

	create := func(n session.Names, labels []msb.Label) {
		t.Helper()
		err := client.Create(ctx, msb.CreateOptions{
			Image:  "alpine",
			Name:   n.Sandbox,
			Mounts: []msb.NamedMount{{Volume: n.Volume, Guest: "/workspace"}},
			Labels: labels,
			Quiet:  true,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	newSession := func(i int, created time.Time) session.Names {
		t.Helper()
		ws, sess := "ws-1", fmt.Sprintf("sess-%d", i)
		n := session.NewNames(session.DefaultPrefix, ws, sess, created, uint64(i))
		create(n, append(session.OwnerLabels(),
			msb.Label{Key: session.LabelWorkspaceID, Value: ws},
			msb.Label{Key: session.LabelSessionID, Value: sess},
			msb.Label{Key: session.LabelCreatedAt, Value: created.UTC().Format(time.RFC3339)}))
		return n
	}

	past := wall.Add(-3 * time.Hour)
	env.SetKnob("FAKEMSB_NOW", past.UTC().Format(time.RFC3339))
	var gone []session.Names
	for i := range 3 {
		gone = append(gone, newSession(i, past))
	}
	// A fork that crashed left its root-disk snapshot; a snapshot the user
	// made stays, however old.
	if err := client.Stop(ctx, msb.StopOptions{Names: []string{gone[0].Sandbox}}); err != nil {
		t.Fatal(err)
	}
	staleSnapshot := session.SnapshotName(session.NewNames(session.DefaultPrefix, "ws-1", "fork", past, 8).Stem)
	for _, snap := range []string{staleSnapshot, "before-pip-install"} {
		if err := client.SnapshotCreate(ctx, msb.SnapshotCreateOptions{Name: snap, From: gone[0].Sandbox, Quiet: true}); err != nil {
			t.Fatal(err)
		}
	}
	orphan := session.NewNames(session.DefaultPrefix, "ws-1", "sess-9", past, 9).Volume
	if err := client.VolumeCreate(ctx, msb.VolumeCreateOptions{Name: orphan}); err != nil {
		t.Fatal(err)
	}
	foreign := session.Names{Sandbox: "build-cache", Volume: "build-cache-data"}
	create(foreign, nil)

	env.SetKnob("FAKEMSB_NOW", "")
	var kept []session.Names
	for i := 3; i < 5; i++ {
		kept = append(kept, newSession(i, wall))
	}

	env.ResetLog(t)
	r, err := Reap(ctx, client, Options{OlderThan: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	wantSandboxes := []string{foreign.Sandbox, kept[0].Sandbox, kept[1].Sandbox}
	wantVolumes := []string{foreign.Volume, kept[0].Volume, kept[1].Volume}
	equal(t, "sandboxes left", env.Sandboxes(t), wantSandboxes)
	equal(t, "volumes left", env.Volumes(t), wantVolumes)
	equal(t, "snapshots left", env.Snapshots(t), []string{"before-pip-install"})
	equal(t, "removed snapshots", r.RemovedSnapshots, []string{staleSnapshot})
	var removedSandboxes, removedVolumes []string
	for _, n := range gone {
		removedSandboxes = append(removedSandboxes, n.Sandbox)
		removedVolumes = append(removedVolumes, n.Volume)
	}
	equal(t, "removed sandboxes", r.RemovedSandboxes, removedSandboxes)
	equal(t, "removed volumes", r.RemovedVolumes, append(removedVolumes, orphan))

	var calls [][]string
	for _, inv := range env.Invocations(t) {
		if inv.Exit != 0 {
			t.Errorf("%q exited %d", inv.Argv, inv.Exit)
		}
		calls = append(calls, inv.Argv)
	}
	// Each stale sandbox is inspected for its last activity.
	want := map[string]int{"list": 1, "volume list": 1, "snapshot list": 1, "inspect": 3, "remove": 3, "volume remove": 4, "snapshot remove": 1}
	if got := count(calls); !maps.Equal(got, want) || len(calls) != 14 {
		t.Errorf("invocations %v, want %v:\n%q", got, want, calls)
	}
	for _, argv := range calls {
		if cmd, _, _ := parseArgv(argv); cmd == "remove" && !slices.Contains(argv, "--force") {
			t.Errorf("sandbox removal without --force: %q", argv)
		}
	}
}

// madeAt creates n sessions of ours on fakemsb as if at time at, stopping
// there those stoppedThen names, and sets fakemsb's clock back to now.
func madeAt(t *testing.T, env *fakemsbtest.Env, client *msb.Client, at time.Time, n int, stoppedThen func(i int) bool) []session.Names {
	t.Helper()
	env.SetKnob("FAKEMSB_NOW", at.UTC().Format(time.RFC3339))
	var made []session.Names
	for i := range n {
		s := session.NewNames(session.DefaultPrefix, "ws-1", fmt.Sprintf("sess-%d", i), at, uint64(i))
		require.NoError(t, client.Create(t.Context(), msb.CreateOptions{Image: "alpine", Name: s.Sandbox, Quiet: true,
			Mounts: []msb.NamedMount{{Volume: s.Volume, Guest: "/workspace"}}, Labels: session.OwnerLabels()}))
		if stoppedThen(i) {
			require.NoError(t, client.Stop(t.Context(), msb.StopOptions{Names: []string{s.Sandbox}}))
		}
		made = append(made, s)
	}
	env.SetKnob("FAKEMSB_NOW", "")
	return made
}

// TestReapFakemsbPausedSession: with fakemsb keeping updated_at as msb
// does, a session made long ago but paused (msb stop) just now is kept,
// and one paused long ago goes.
func TestReapFakemsbPausedSession(t *testing.T) {
	env := fakemsbtest.New(t)
	client := msb.NewClient(&msb.CLI{Path: env.Bin})
	ctx := t.Context()
	made := madeAt(t, env, client, time.Now().Add(-3*time.Hour), 2, func(i int) bool { return i == 0 })
	pausedLongAgo, pausedNow := made[0], made[1]
	require.NoError(t, client.Stop(ctx, msb.StopOptions{Names: []string{pausedNow.Sandbox}}))

	r, err := Reap(ctx, client, Options{OlderThan: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "removed sandboxes", r.RemovedSandboxes, []string{pausedLongAgo.Sandbox})
	equal(t, "sandboxes left", env.Sandboxes(t), []string{pausedNow.Sandbox})
	equal(t, "volumes left", env.Volumes(t), []string{pausedNow.Volume})
}

// TestReapFakemsbOverlap: overlapping sweeps (cron runs without a lock)
// are harmless: each resource goes once, and the sweeps that find it
// already gone report no error (docs/reaper.md, "Run it on a schedule").
func TestReapFakemsbOverlap(t *testing.T) {
	env := fakemsbtest.New(t)
	client := msb.NewClient(&msb.CLI{Path: env.Bin})
	ctx := t.Context()
	madeAt(t, env, client, time.Now().Add(-3*time.Hour), 12, func(i int) bool { return i%2 == 0 })
	var wg sync.WaitGroup
	reps := make([]*Report, 3)
	errs := make([]error, 3)
	for i := range reps {
		wg.Go(func() { reps[i], errs[i] = Reap(ctx, client, Options{OlderThan: 2 * time.Hour, Concurrency: 4}) })
	}
	wg.Wait()
	for i := range reps {
		assert.NoError(t, errs[i])
	}
	assert.Empty(t, env.Sandboxes(t))
	assert.Empty(t, env.Volumes(t))
}

// TestReapFakemsbResumedSession: a session made long ago, paused and
// resumed a moment ago is in use again, as much as one paused a moment ago
// that the sweep keeps: it is aged from its resume, not killed.
func TestReapFakemsbResumedSession(t *testing.T) {
	env := fakemsbtest.New(t)
	client := msb.NewClient(&msb.CLI{Path: env.Bin})
	ctx := t.Context()
	made := madeAt(t, env, client, time.Now().Add(-3*time.Hour), 3, func(int) bool { return false })
	runningLongAgo, pausedNow, resumedNow := made[0], made[1], made[2]
	for _, n := range []session.Names{pausedNow, resumedNow} {
		require.NoError(t, client.Stop(ctx, msb.StopOptions{Names: []string{n.Sandbox}}))
	}
	require.NoError(t, client.Start(ctx, resumedNow.Sandbox))

	r, err := Reap(ctx, client, Options{OlderThan: 2 * time.Hour})
	require.NoError(t, err)
	assert.Equal(t, []string{runningLongAgo.Sandbox}, r.RemovedSandboxes)
	equal(t, "sandboxes left", env.Sandboxes(t), []string{pausedNow.Sandbox, resumedNow.Sandbox})
	equal(t, "volumes left", env.Volumes(t), []string{pausedNow.Volume, resumedNow.Volume})
}
