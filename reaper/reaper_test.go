package reaper

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/goleak"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	now     = time.Date(2026, 8, 22, 12, 0, 0, 0, time.UTC)
	stale   = now.Add(-3 * time.Hour)
	young   = now.Add(-10 * time.Minute)
	maxAge  = 2 * time.Hour
	options = Options{OlderThan: maxAge, Now: func() time.Time { return now }}
)

// names returns the resource names of session i, created at t.
func names(prefix string, i int, t time.Time) session.Names {
	return session.NewNames(prefix, fmt.Sprintf("ws-%d", i), fmt.Sprintf("sess-%d", i), t, uint64(i))
}

// addSession adds a sandbox of ours and its volume, both created at t.
func (f *fakeRunner) addSession(i int, t time.Time) session.Names {
	n := names(session.DefaultPrefix, i, t)
	f.addSandbox(n.Sandbox, t, session.OwnerLabels())
	f.addVolume(n.Volume, t)
	return n
}

// count tallies invocations by subcommand.
func count(calls [][]string) map[string]int {
	c := map[string]int{}
	for _, argv := range calls {
		cmd, _, _ := parseArgv(argv)
		c[cmd]++
	}
	return c
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	got, want = sorted(got), sorted(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %d %q\nwant %d %q", what, len(got), got, len(want), want)
	}
}

func TestReapScale(t *testing.T) {
	f := newFakeRunner()
	var wantSandboxes, wantVolumes, keptSandboxes, keptVolumes []string
	for i := range 200 {
		n := f.addSession(i, stale.Add(-time.Duration(i)*time.Minute))
		wantSandboxes = append(wantSandboxes, n.Sandbox)
		wantVolumes = append(wantVolumes, n.Volume)
	}
	for i := 200; i < 250; i++ {
		n := f.addSession(i, young)
		keptSandboxes = append(keptSandboxes, n.Sandbox)
		keptVolumes = append(keptVolumes, n.Volume)
	}
	for i := 250; i < 280; i++ {
		n := names(session.DefaultPrefix, i, stale)
		f.addVolume(n.Volume, stale)
		wantVolumes = append(wantVolumes, n.Volume)
	}
	for i := 280; i < 290; i++ {
		// Our name form but no labels: not ours.
		n := names(session.DefaultPrefix, i, stale)
		f.addSandbox(n.Sandbox, stale, nil)
		keptSandboxes = append(keptSandboxes, n.Sandbox)
		// Our labels but another prefix: not ours.
		n = names("ci", i, stale)
		f.addSandbox(n.Sandbox, stale, session.OwnerLabels())
		f.addVolume(n.Volume, stale)
		keptSandboxes = append(keptSandboxes, n.Sandbox)
		keptVolumes = append(keptVolumes, n.Volume)
		other := fmt.Sprintf("data-%d", i)
		f.addVolume(other, stale)
		keptVolumes = append(keptVolumes, other)
	}

	r, err := Reap(t.Context(), msb.NewClient(f), options)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "removed sandboxes", r.RemovedSandboxes, wantSandboxes)
	equal(t, "removed volumes", r.RemovedVolumes, wantVolumes)
	equal(t, "sandboxes left", f.sandboxNames(), keptSandboxes)
	equal(t, "volumes left", f.volumeNames(), keptVolumes)
	if len(r.Skipped) != 100 || len(r.Errors) != 0 {
		t.Errorf("skipped %d (want 50 young sandboxes + their 50 volumes), errors %v", len(r.Skipped), r.Errors)
	}

	calls := f.log()
	// Each stale sandbox is stopped: one inspect reads its last activity.
	want := map[string]int{"list": 1, "volume list": 1, "snapshot list": 1, "inspect": 200, "remove": 200, "volume remove": 230}
	if got := count(calls); !maps.Equal(got, want) {
		t.Errorf("invocations %v, want %v", got, want)
	}
	if len(calls) != 3+200+200+230 {
		t.Errorf("%d invocations, want 633", len(calls))
	}
	removedFirst := map[string]bool{}
	for _, argv := range calls {
		cmd, labels, ns := parseArgv(argv)
		switch cmd {
		case "list":
			if want := map[string]string{session.LabelSandbox: session.SandboxLabelValue, session.LabelOwner: session.OwnerLabelValue}; !maps.Equal(labels, want) {
				t.Errorf("list filters %v, want %v", labels, want)
			}
		case "remove":
			if !slices.Contains(argv, "--force") && !slices.Contains(argv, "-f") {
				t.Errorf("sandbox removal without --force: %q", argv)
			}
			removedFirst[ns[0]] = true
		case "volume remove":
			// removedFirst holds the removals logged so far, so a missing
			// entry means the sandbox was not removed first.
			stem, _ := session.VolumeStem(session.DefaultPrefix, ns[0])
			sb := session.NamesFromStem(stem).Sandbox
			if !removedFirst[sb] && slices.Contains(wantSandboxes, sb) {
				t.Errorf("volume %s removed before its sandbox", ns[0])
			}
		}
	}
}

func TestReapRemovalFault(t *testing.T) {
	f := newFakeRunner()
	var pairs []session.Names
	for i := range 20 {
		pairs = append(pairs, f.addSession(i, stale))
	}
	orphan := names(session.DefaultPrefix, 99, stale).Volume
	f.addVolume(orphan, stale)
	f.fail[pairs[7].Sandbox] = "internal error: vm did not stop"
	f.fail[pairs[12].Volume] = "I/O error: read-only file system"

	opts, sums := measured()
	r, err := Reap(t.Context(), msb.NewClient(f), opts)
	if err == nil {
		t.Fatal("Reap succeeded despite failed removals")
	}
	if r == nil {
		t.Fatal("no report with the error")
	}
	if len(r.Errors) != 2 {
		t.Fatalf("errors %v, want 2", r.Errors)
	}
	for _, name := range []string{pairs[7].Sandbox, pairs[12].Volume} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	equal(t, "sandboxes left", f.sandboxNames(), []string{pairs[7].Sandbox})
	equal(t, "volumes left", f.volumeNames(), []string{pairs[7].Volume, pairs[12].Volume})
	if len(r.RemovedSandboxes) != 19 || len(r.RemovedVolumes) != 19 {
		t.Errorf("removed %d sandboxes and %d volumes, want 19 and 19 (18 paired + the orphan)",
			len(r.RemovedSandboxes), len(r.RemovedVolumes))
	}
	want := Skipped{Name: pairs[7].Volume, Kind: KindVolume, Reason: "its sandbox " + pairs[7].Sandbox + " could not be removed"}
	if !slices.Equal(r.Skipped, []Skipped{want}) {
		t.Errorf("skipped %+v, want %+v", r.Skipped, want)
	}
	for _, argv := range f.log() {
		if _, _, ns := parseArgv(argv); slices.Contains(ns, pairs[7].Volume) {
			t.Errorf("volume of the failed sandbox was still attempted: %q", argv)
		}
	}
	sweepMetrics(t, sums, map[string]int64{"failed": 1}, map[string]int64{"sandbox": 19, "volume": 19}, map[string]int64{"sandbox": 1, "volume": 1})
}

// measured is options with a meter provider on a manual reader, and a
// func that reads an instrument's sums back by the attribute key's value.
func measured() (Options, func(t *testing.T, name, key string) map[string]int64) {
	reader := sdkmetric.NewManualReader()
	opts := options
	opts.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	return opts, func(t *testing.T, name, key string) map[string]int64 { return testutil.SumsBy(t, reader, name, key) }
}

// sweepMetrics checks the sweeps by outcome, and the removed and failed
// resources by kind.
func sweepMetrics(t *testing.T, sums func(t *testing.T, name, key string) map[string]int64, sweeps, removed, failed map[string]int64) {
	t.Helper()
	for _, c := range []struct {
		name, key string
		want      map[string]int64
	}{{SweepsMetric, "oma.outcome", sweeps}, {RemovedMetric, "oma.kind", removed}, {FailedMetric, "oma.kind", failed}} {
		if got := sums(t, c.name, c.key); !maps.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestReapDryRun(t *testing.T) {
	f := newFakeRunner()
	old := f.addSession(1, stale)
	kept := f.addSession(2, young)
	orphan := names(session.DefaultPrefix, 3, stale).Volume
	f.addVolume(orphan, stale)
	before, beforeVolumes := f.sandboxNames(), f.volumeNames()

	opts, sums := measured()
	opts.DryRun = true
	r, err := Reap(t.Context(), msb.NewClient(f), opts)
	if err != nil {
		t.Fatal(err)
	}
	// A dry run removes nothing, and counts nothing removed.
	sweepMetrics(t, sums, map[string]int64{"ok": 1}, map[string]int64{}, map[string]int64{})
	equal(t, "sandboxes left", f.sandboxNames(), before)
	equal(t, "volumes left", f.volumeNames(), beforeVolumes)
	if got := count(f.log()); !maps.Equal(got, map[string]int{"list": 1, "volume list": 1, "snapshot list": 1, "inspect": 1}) {
		t.Errorf("invocations %v, want the 3 listings and the stale stopped sandbox's inspect", got)
	}
	if !r.DryRun {
		t.Error("report does not say dry run")
	}
	equal(t, "would remove sandboxes", r.RemovedSandboxes, []string{old.Sandbox})
	equal(t, "would remove volumes", r.RemovedVolumes, []string{old.Volume, orphan})
	if len(r.Skipped) != 2 || r.Skipped[0].Name != kept.Sandbox || r.Skipped[1].Name != kept.Volume {
		t.Errorf("skipped %+v, want the young pair", r.Skipped)
	}
}

func TestReapLegacyCreatedAt(t *testing.T) {
	f := newFakeRunner()
	legacy := func(t time.Time) string { return t.In(time.Local).Format(time.DateTime) }
	old := names(session.DefaultPrefix, 1, stale)
	f.addSandboxRaw(old.Sandbox, legacy(stale), session.OwnerLabels())
	f.addVolume(old.Volume, stale)
	kept := names(session.DefaultPrefix, 2, young)
	f.addSandboxRaw(kept.Sandbox, legacy(young), session.OwnerLabels())

	r, err := Reap(t.Context(), msb.NewClient(f), options)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "removed sandboxes", r.RemovedSandboxes, []string{old.Sandbox})
	equal(t, "sandboxes left", f.sandboxNames(), []string{kept.Sandbox})
}

func TestReapConcurrencyBound(t *testing.T) {
	for _, tc := range []struct{ limit, want int }{{3, 3}, {0, DefaultConcurrency}} {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			f := newFakeRunner()
			f.delay = 20 * time.Millisecond
			for i := range 5 * tc.want {
				f.addVolume(names(session.DefaultPrefix, i, stale).Volume, stale)
			}
			opts := options
			opts.Concurrency = tc.limit
			r, err := Reap(t.Context(), msb.NewClient(f), opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.RemovedVolumes) != 5*tc.want {
				t.Errorf("removed %d volumes, want %d", len(r.RemovedVolumes), 5*tc.want)
			}
			if f.peak != tc.want {
				t.Errorf("peak of concurrent msb calls %d, want %d", f.peak, tc.want)
			}
		})
	}
}

func TestReapAlreadyGoneAndAttached(t *testing.T) {
	f := newFakeRunner()
	gone := f.addSession(1, stale)
	f.gone[gone.Sandbox] = true
	orphan := names(session.DefaultPrefix, 2, stale).Volume
	f.addVolume(orphan, stale)
	f.gone[orphan] = true
	attached := names(session.DefaultPrefix, 3, stale).Volume
	f.addVolume(attached, stale)
	f.fail[attached] = `invalid config: volume "` + attached + `" is attached to active sandbox "other"`

	r, err := Reap(t.Context(), msb.NewClient(f), options)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "removed volumes", r.RemovedVolumes, []string{gone.Volume})
	want := []Skipped{
		{Name: gone.Sandbox, Kind: KindSandbox, Reason: "already gone"},
		{Name: orphan, Kind: KindVolume, Reason: "already gone"},
		{Name: attached, Kind: KindVolume, Reason: "attached to an active sandbox"},
	}
	slices.SortFunc(want, func(a, b Skipped) int { return strings.Compare(a.Kind+a.Name, b.Kind+b.Name) })
	if !slices.Equal(r.Skipped, want) {
		t.Errorf("skipped\n got %+v\nwant %+v", r.Skipped, want)
	}
}

func TestReapPairing(t *testing.T) {
	f := newFakeRunner()
	// A young sandbox keeps its volume even when the volume reads as stale.
	live := names(session.DefaultPrefix, 1, young)
	f.addSandbox(live.Sandbox, young, session.OwnerLabels())
	f.addVolume(live.Volume, stale)
	// A stale sandbox goes; its young volume stays.
	old := names(session.DefaultPrefix, 2, stale)
	f.addSandbox(old.Sandbox, stale, session.OwnerLabels())
	f.addVolume(old.Volume, young)
	// A young orphan stays.
	fresh := names(session.DefaultPrefix, 3, young).Volume
	f.addVolume(fresh, young)

	r, err := Reap(t.Context(), msb.NewClient(f), options)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "removed sandboxes", r.RemovedSandboxes, []string{old.Sandbox})
	equal(t, "removed volumes", r.RemovedVolumes, nil)
	equal(t, "volumes left", f.volumeNames(), []string{live.Volume, old.Volume, fresh})
	reasons := map[string]string{}
	for _, s := range r.Skipped {
		reasons[s.Name] = s.Reason
	}
	if got := reasons[live.Volume]; got != "its sandbox "+live.Sandbox+" is kept" {
		t.Errorf("volume of the live sandbox: reason %q", got)
	}
	for _, name := range []string{live.Sandbox, old.Volume, fresh} {
		if !strings.HasPrefix(reasons[name], "younger than 2h0m0s (age 10m0s)") {
			t.Errorf("%s: reason %q", name, reasons[name])
		}
	}
}

func TestReapExtraLabelsLeaveOrphans(t *testing.T) {
	f := newFakeRunner()
	mine := names(session.DefaultPrefix, 1, stale)
	f.addSandbox(mine.Sandbox, stale, append(session.OwnerLabels(), msb.Label{Key: session.LabelWorkspaceID, Value: "ws-1"}))
	f.addVolume(mine.Volume, stale)
	other := names(session.DefaultPrefix, 2, stale)
	f.addSandbox(other.Sandbox, stale, append(session.OwnerLabels(), msb.Label{Key: session.LabelWorkspaceID, Value: "ws-2"}))
	f.addVolume(other.Volume, stale)
	orphan := names(session.DefaultPrefix, 3, stale).Volume
	f.addVolume(orphan, stale)

	opts := options
	opts.Labels = []msb.Label{{Key: session.LabelWorkspaceID, Value: "ws-1"}}
	r, err := Reap(t.Context(), msb.NewClient(f), opts)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "removed sandboxes", r.RemovedSandboxes, []string{mine.Sandbox})
	equal(t, "removed volumes", r.RemovedVolumes, []string{mine.Volume})
	equal(t, "volumes left", f.volumeNames(), []string{other.Volume, orphan})
	var labels map[string]string
	for _, argv := range f.log() {
		if cmd, l, _ := parseArgv(argv); cmd == "list" {
			labels = l
		}
	}
	if labels[session.LabelWorkspaceID] != "ws-1" || labels[session.LabelOwner] != session.OwnerLabelValue {
		t.Errorf("list filters %v lack the extra or the owner label", labels)
	}
}

func TestReapOptions(t *testing.T) {
	client := msb.NewClient(newFakeRunner())
	for _, d := range []time.Duration{0, -time.Hour} {
		if r, err := Reap(t.Context(), client, Options{OlderThan: d}); err == nil || r != nil || !strings.Contains(err.Error(), "OlderThan") {
			t.Errorf("OlderThan %v: report %v, error %v", d, r, err)
		}
	}
	if _, err := Reap(t.Context(), nil, options); err == nil {
		t.Error("nil client accepted")
	}
	f := newFakeRunner()
	f.failList = 1
	if r, err := Reap(t.Context(), msb.NewClient(f), options); err == nil || r != nil {
		t.Errorf("failed listing: report %v, error %v", r, err)
	}
	// A dash in the prefix: "oma-ci-ws-…" would read as prefix oma too.
	f = newFakeRunner()
	f.addSession(1, stale)
	bad := options
	bad.Prefix = "oma-ci"
	r, err := Reap(t.Context(), msb.NewClient(f), bad)
	assert.Nil(t, r)
	assert.ErrorContains(t, err, `reaper: prefix "oma-ci": want 1 to 16 characters`)
	assert.Empty(t, f.log(), "msb was called")
}

func TestReportJSON(t *testing.T) {
	f := newFakeRunner()
	n := f.addSession(1, stale)
	f.fail[n.Sandbox] = "internal error: boom"
	r, _ := Reap(t.Context(), msb.NewClient(f), options)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"dry_run":           false,
		"removed_sandboxes": []any{},
		"removed_volumes":   []any{},
		"removed_snapshots": []any{},
		"skipped": []any{map[string]any{
			"name": n.Volume, "kind": "volume", "reason": "its sandbox " + n.Sandbox + " could not be removed",
		}},
		"counts": map[string]any{
			"sandbox":  map[string]any{"listed": 1.0, "foreign": 0.0, "failed": 1.0},
			"volume":   map[string]any{"listed": 1.0, "foreign": 0.0, "failed": 0.0},
			"snapshot": map[string]any{"listed": 0.0, "foreign": 0.0, "failed": 0.0},
		},
		"errors": []any{r.Errors[0].Error()},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JSON %s\nwant %v", b, want)
	}
	if !strings.Contains(r.Errors[0].Error(), n.Sandbox) {
		t.Errorf("error %q does not name the sandbox", r.Errors[0])
	}
}

func TestReapCancelledStopsStarting(t *testing.T) {
	f := newFakeRunner()
	for i := range 10 {
		f.addVolume(names(session.DefaultPrefix, i, stale).Volume, stale)
	}
	ctx, cancel := context.WithCancel(t.Context())
	f.hook = func(_ context.Context, argv []string) error {
		if cmd, _, _ := parseArgv(argv); cmd == "volume remove" {
			cancel()
		}
		return nil
	}
	opts := options
	opts.Concurrency = 1
	r, err := Reap(ctx, msb.NewClient(f), opts)
	if err == nil || len(r.Errors) != 1 || !strings.Contains(err.Error(), "9 removals not started") {
		t.Errorf("error %v, report errors %v", err, r.Errors)
	}
	if got := count(f.log())["volume remove"]; got != 1 {
		t.Errorf("%d removals ran after cancel, want 1", got)
	}
	if got := r.Counts[KindVolume].Failed; got != 9 {
		t.Errorf("%d volumes counted as failed, want the 9 not started", got)
	}
}

// TestReapCounts: every listed resource is counted once, as removed, kept,
// foreign or failed, by kind.
func TestReapCounts(t *testing.T) {
	f := newFakeRunner()
	f.addSession(1, stale)
	f.addSession(2, stale)
	failing := f.addSession(3, stale)
	f.fail[failing.Volume] = "internal error: disk busy"
	f.addSession(4, young)
	ci := names("ci", 5, stale) // our labels, another prefix
	f.addSandbox(ci.Sandbox, stale, session.OwnerLabels())
	f.addVolume(ci.Volume, stale)
	f.addSandbox(names(session.DefaultPrefix, 6, stale).Sandbox, stale, nil) // unlabelled: not listed
	f.addVolume("data-1", stale)
	f.addVolume(names(session.DefaultPrefix, 7, stale).Volume, stale)                    // an orphan of ours
	f.addVolume(names(session.DefaultPrefix, 8, stale.Add(-48*time.Hour)).Volume, stale) // not made when named
	f.addSnapshot(session.SnapshotName(names(session.DefaultPrefix, 9, stale).Stem), stale)
	f.addSnapshot("before-pip-install", stale)

	r, err := Reap(t.Context(), msb.NewClient(f), options)
	if err == nil || len(r.Errors) != 1 {
		t.Fatalf("err = %v, want the volume's failed removal", err)
	}
	want := map[string]Count{
		KindSandbox:  {Listed: 5, Foreign: 1},
		KindVolume:   {Listed: 8, Foreign: 3, Failed: 1},
		KindSnapshot: {Listed: 2, Foreign: 1},
	}
	if !maps.Equal(r.Counts, want) {
		t.Errorf("counts %+v, want %+v", r.Counts, want)
	}
	removed := map[string]int{KindSandbox: len(r.RemovedSandboxes), KindVolume: len(r.RemovedVolumes), KindSnapshot: len(r.RemovedSnapshots)}
	kept := map[string]int{}
	for _, sk := range r.Skipped {
		kept[sk.Kind]++
	}
	for kind, c := range r.Counts {
		if sum := removed[kind] + kept[kind] + c.Foreign + c.Failed; sum != c.Listed {
			t.Errorf("%s: %d removed + %d kept + %d foreign + %d failed = %d, want the %d listed", kind, removed[kind], kept[kind], c.Foreign, c.Failed, sum, c.Listed)
		}
	}
}

// TestReapPausedByLastActivity: a sandbox's age counts from its last
// activity (inspect's updated_at, moved by every start and stop): a
// stopped (paused) one, and a running one resumed a moment ago, are kept
// however old; only sandboxes stale by their creation are inspected, and
// one whose last activity cannot be read is kept, with an error.
func TestReapPausedByLastActivity(t *testing.T) {
	f := newFakeRunner()
	pausedRecently := f.addSession(1, stale)
	f.setActivity(pausedRecently.Sandbox, "Stopped", now.Add(-30*time.Minute))
	pausedLongAgo := f.addSession(2, stale)
	f.setActivity(pausedLongAgo.Sandbox, "Stopped", now.Add(-150*time.Minute))
	crashedRecently := f.addSession(3, stale)
	f.setActivity(crashedRecently.Sandbox, "Crashed", now.Add(-time.Minute))
	resumed := f.addSession(4, stale)
	f.setActivity(resumed.Sandbox, "Running", now.Add(-time.Minute))
	running := f.addSession(8, stale)
	f.setActivity(running.Sandbox, "Running", stale)
	unreadable := f.addSession(5, stale)
	f.fail["inspect "+unreadable.Sandbox] = "database is locked"
	youngPaused := f.addSession(6, young)
	noUpdate := f.addSession(7, stale)
	sb := f.sandboxes[noUpdate.Sandbox]
	sb.updated = "null"
	f.sandboxes[noUpdate.Sandbox] = sb

	r, err := Reap(t.Context(), msb.NewClient(f), options)
	if err == nil || !strings.Contains(err.Error(), "inspect sandbox "+unreadable.Sandbox+" for its last activity") {
		t.Errorf("err = %v, want the failed inspection", err)
	}
	equal(t, "removed sandboxes", r.RemovedSandboxes, []string{pausedLongAgo.Sandbox, noUpdate.Sandbox, running.Sandbox})
	equal(t, "sandboxes left", f.sandboxNames(), []string{pausedRecently.Sandbox, crashedRecently.Sandbox, resumed.Sandbox, unreadable.Sandbox, youngPaused.Sandbox})
	equal(t, "volumes left", f.volumeNames(), []string{pausedRecently.Volume, crashedRecently.Volume, resumed.Volume, unreadable.Volume, youngPaused.Volume})
	reasons := map[string]string{}
	for _, sk := range r.Skipped {
		reasons[sk.Name] = sk.Reason
	}
	if want := "stopped, last active less than 2h0m0s ago (30m0s)"; reasons[pausedRecently.Sandbox] != want {
		t.Errorf("paused sandbox kept because %q, want %q", reasons[pausedRecently.Sandbox], want)
	}
	if want := "running, last active less than 2h0m0s ago (1m0s)"; reasons[resumed.Sandbox] != want {
		t.Errorf("resumed sandbox kept because %q, want %q", reasons[resumed.Sandbox], want)
	}
	if reason, ok := reasons[unreadable.Sandbox]; ok {
		t.Errorf("unreadable sandbox reported kept (%q) as well as failed", reason)
	}
	var inspected []string
	for _, argv := range f.log() {
		if cmd, _, ns := parseArgv(argv); cmd == "inspect" {
			inspected = append(inspected, ns[0])
		}
	}
	slices.Sort(inspected)
	equal(t, "inspected", inspected, []string{pausedRecently.Sandbox, pausedLongAgo.Sandbox, crashedRecently.Sandbox, resumed.Sandbox, unreadable.Sandbox, noUpdate.Sandbox, running.Sandbox})
}

// Snapshots: a fork removes its root-disk snapshot once it is created, so
// a stale one of ours was left by a crash and goes; a young one (a fork in
// progress), one whose name only looks like ours or whose created_at is not
// its name's time, an unnamed one and the user's stay. One already gone at
// removal is skipped.
func TestReapSnapshots(t *testing.T) {
	f := newFakeRunner()
	snapshot := func(i int, at time.Time) string {
		return session.SnapshotName(names(session.DefaultPrefix, i, at).Stem)
	}
	ours, gone, youngOne := snapshot(1, stale), snapshot(2, stale), snapshot(3, young)
	foreign := []string{"before-pip-install", "", snapshot(4, stale.Add(-48*time.Hour)), names(session.DefaultPrefix, 5, stale).Sandbox}
	for _, n := range []string{ours, gone, youngOne} {
		f.addSnapshot(n, now.Add(-now.Sub(stale)))
	}
	f.snapshots[youngOne] = rfc3339(young)
	for _, n := range foreign {
		f.addSnapshot(n, stale) // the 3rd was made two days after its name's time
	}
	f.gone[gone] = true

	r, err := Reap(t.Context(), msb.NewClient(f), options)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "removed snapshots", r.RemovedSnapshots, []string{ours})
	equal(t, "snapshots left", f.snapshotNames(), append([]string{gone, youngOne}, foreign...))
	wantSkipped := []Skipped{
		{Name: gone, Kind: KindSnapshot, Reason: "already gone"},
		{Name: youngOne, Kind: KindSnapshot, Reason: "younger than 2h0m0s (age 10m0s)"},
	}
	slices.SortFunc(wantSkipped, func(a, b Skipped) int { return strings.Compare(a.Name, b.Name) })
	if !reflect.DeepEqual(r.Skipped, wantSkipped) {
		t.Errorf("skipped %+v, want %+v", r.Skipped, wantSkipped)
	}

	// A dry run reports and removes nothing; narrowed labels leave
	// snapshots alone, unlisted.
	f.addSnapshot(ours, stale)
	dry := options
	dry.DryRun = true
	if r, err = Reap(t.Context(), msb.NewClient(f), dry); err != nil || !slices.Equal(r.RemovedSnapshots, sorted([]string{ours, gone})) {
		t.Errorf("dry run: %+v, %v", r, err)
	}
	narrowed := options
	narrowed.Labels = []msb.Label{{Key: session.LabelWorkspaceID, Value: "ws-1"}}
	before := len(f.log())
	if r, err = Reap(t.Context(), msb.NewClient(f), narrowed); err != nil || len(r.RemovedSnapshots) != 0 {
		t.Errorf("narrowed: %+v, %v", r, err)
	}
	for _, argv := range f.log()[before:] {
		if argv[0] == "snapshot" {
			t.Errorf("narrowed sweep ran %q", argv)
		}
	}
	if !slices.Contains(f.snapshotNames(), ours) {
		t.Error("a snapshot was removed by a dry or narrowed sweep")
	}
}

// A backend without snapshots: the failed listing is an error in the
// report, and sandboxes and volumes are still swept.
func TestReapSnapshotListFails(t *testing.T) {
	f := newFakeRunner()
	n := f.addSession(1, stale)
	f.fail["snapshot list"] = "unsupported operation: snapshot list"
	r, err := Reap(t.Context(), msb.NewClient(f), options)
	if err == nil || !strings.Contains(err.Error(), "list snapshots") {
		t.Errorf("err = %v, want the snapshot listing's failure", err)
	}
	equal(t, "removed sandboxes", r.RemovedSandboxes, []string{n.Sandbox})
	equal(t, "removed volumes", r.RemovedVolumes, []string{n.Volume})
}

// TestReapOneClockPerSweep: a sweep measures every age against one time.
// A stopped sandbox just younger than OlderThan when the sweep began is not
// inspected; if the inspections of others take long enough for it to pass
// OlderThan by the time the sweep decides, it must still not be removed
// without its last activity read: it was paused a moment ago.
func TestReapOneClockPerSweep(t *testing.T) {
	f := newFakeRunner()
	// A stale stopped sandbox whose inspection takes a minute of the clock.
	slow := f.addSession(1, stale)
	// Created just under OlderThan ago, paused a moment ago.
	paused := f.addSession(2, now.Add(-maxAge+30*time.Second))
	f.setActivity(paused.Sandbox, "Stopped", now.Add(-10*time.Second))

	var clock atomic.Int64
	clock.Store(now.UnixNano())
	f.hook = func(_ context.Context, argv []string) error {
		if cmd, _, _ := parseArgv(argv); cmd == "inspect" {
			clock.Add(int64(time.Minute))
		}
		return nil
	}
	opts := options
	opts.Now = func() time.Time { return time.Unix(0, clock.Load()).UTC() }

	r, err := Reap(t.Context(), msb.NewClient(f), opts)
	require.NoError(t, err)
	assert.Equal(t, []string{slow.Sandbox}, r.RemovedSandboxes)
	assert.Contains(t, f.sandboxNames(), paused.Sandbox, "a sandbox paused 10s ago was removed")
	assert.Contains(t, f.volumeNames(), paused.Volume)
}

// TestReapCountsFailedInspection: a sandbox whose last activity cannot be
// read is counted once, as failed (docs/operations.md: listed = removed +
// kept + foreign + failed), and so is its volume, as kept.
func TestReapCountsFailedInspection(t *testing.T) {
	f := newFakeRunner()
	unreadable := f.addSession(1, stale)
	f.fail["inspect "+unreadable.Sandbox] = "database is locked"

	r, err := Reap(t.Context(), msb.NewClient(f), options)
	require.ErrorContains(t, err, "inspect sandbox "+unreadable.Sandbox+" for its last activity")
	assert.Equal(t, Count{Listed: 1, Failed: 1}, r.Counts[KindSandbox])
	assert.Equal(t, []Skipped{{Name: unreadable.Volume, Kind: KindVolume, Reason: "its sandbox " + unreadable.Sandbox + " is kept"}}, r.Skipped,
		"the sandbox is counted failed, so it is not also kept")
	assert.Equal(t, []string{unreadable.Sandbox}, f.sandboxNames())
}
