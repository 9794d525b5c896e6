// Package reaper removes stale sandboxes of ours, their workspace volumes
// and the root-disk snapshots forks left, using nothing but msb's own
// listings.
//
// What counts as ours: a sandbox listed by `msb list` under the owner labels
// (session.OwnerLabels, ANDed with Options.Labels) whose name is a sandbox
// name of Options.Prefix (session.SandboxStem: the whole grammar, prefix,
// ids, time and random parts); the workspace volume of such a sandbox; and
// a volume without a listed sandbox whose name is exactly a workspace
// volume name of Options.Prefix (session.VolumeStem) and whose created_at
// is within an hour of the time that name encodes. Volumes carry no labels,
// so this is all that tells ours apart. Likewise a snapshot (`msb snapshot
// list` shows no labels) whose name is exactly a fork's snapshot name of
// Options.Prefix (session.SnapshotStem) made within an hour of its name's
// time: a fork removes its snapshot once the fork is created, so one that
// is still listed was left by a fork that crashed. Nothing else is touched, whatever
// its age, and listing entries that are not ours are never validated, so an
// odd one cannot stop a sweep. A sandbox and its volume share one stem, so
// they are paired by name alone.
//
// What is removed: a sandbox of ours at least Options.OlderThan old, with
// --force; then its volume when that is stale too. A sandbox's age counts
// from its last activity: the later of its creation and the updated_at of
// `msb inspect`, which msb moves on every start (a resume), stop (a pause,
// an idle stop) and applied modify, and never on a guest's say: a stopped
// sandbox runs nothing, so nothing happened in it since, and a running one
// resumed a moment ago is in use again. A volume whose paired
// sandbox is listed and kept stays, and so does the volume of a sandbox whose
// removal failed (msb would refuse it while the sandbox lives). A stale volume
// with no listed sandbox is an orphan and goes, and so does a snapshot of
// ours at least Options.OlderThan old. When Options.Labels narrow the
// listing, sandboxes outside it cannot be seen, so orphans and snapshots
// are left alone then: the sweep covers the listed sandboxes and their
// volumes only.
//
// Order: each stale sandbox is removed before its volume; pairs and orphans
// run concurrently, at most Options.Concurrency msb calls at once. One failed
// removal does not stop the others. A resource that is already gone at
// removal time is reported as skipped, not as an error.
//
// Invocation budget: one sweep is three listings (`list --format json` with
// the label filter, `volume list --format json` and `snapshot list --format
// json`, run concurrently; their created_at fields give every age; a failed
// snapshot listing, as on a backend without snapshots, is an error in the
// report and the rest of the sweep goes on), one `inspect` per sandbox of
// ours that is stale by its creation (its last activity may be recent),
// and one msb call per removal. A dry run makes the listings and the
// inspections only. A sandbox whose inspection fails is kept, with an
// error in the report.
package reaper

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"golang.org/x/sync/errgroup"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// DefaultConcurrency bounds concurrent removals when Options.Concurrency is 0.
const DefaultConcurrency = 8

// Kinds of resource in a Report.
const (
	KindSandbox  = "sandbox"
	KindVolume   = "volume"
	KindSnapshot = "snapshot"
)

// Options configure a sweep.
type Options struct {
	// OlderThan is the age from which a resource is stale. Required, > 0.
	OlderThan time.Duration
	// Prefix selects our names; "" means session.DefaultPrefix.
	Prefix string
	// Labels are extra sandbox label filters, ANDed with the owner labels.
	Labels []msb.Label
	// DryRun lists and reports what would be removed, and removes nothing.
	DryRun bool
	// Concurrency bounds concurrent removals; 0 or less means DefaultConcurrency.
	Concurrency int
	// Now is the clock ages are measured against, read once as a sweep
	// starts; nil means time.Now.
	Now func() time.Time
	// Logger gets a line per removal and a summary; nil discards them.
	Logger *slog.Logger
	// MeterProvider gets the sweep's counts (SweepsMetric, RemovedMetric,
	// FailedMetric); nil means otel.GetMeterProvider(), a no-op unless
	// the program installed one.
	MeterProvider metric.MeterProvider
}

// Skipped is a resource of ours that a sweep left in place, and why.
type Skipped struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"` // KindSandbox, KindVolume or KindSnapshot
	Reason string `json:"reason"`
}

// Count tallies one kind of resource in a sweep, beside the names the
// Report lists, so that a monitor sees what the sweep looked at.
type Count struct {
	// Listed is how many entries msb's listing of this kind returned.
	Listed int `json:"listed"`
	// Foreign is how many of them are not ours (another name form, or not
	// provably ours): never touched.
	Foreign int `json:"foreign"`
	// Failed is how many resources of this kind the sweep could not act
	// on: a removal that failed or never started, an inspection that
	// failed (the sandbox is kept), a failed listing (one).
	Failed int `json:"failed"`
}

// Report is the outcome of one sweep. In a dry run the Removed lists name
// what would have been removed.
type Report struct {
	DryRun           bool      `json:"dry_run"`
	RemovedSandboxes []string  `json:"removed_sandboxes"`
	RemovedVolumes   []string  `json:"removed_volumes"`
	RemovedSnapshots []string  `json:"removed_snapshots"`
	Skipped          []Skipped `json:"skipped"`
	// Counts has a Count for each of KindSandbox, KindVolume and
	// KindSnapshot.
	Counts map[string]Count `json:"counts"`
	// Errors holds one error per failed removal, each naming its resource.
	Errors []error `json:"-"`
}

// MarshalJSON writes Errors as strings under "errors".
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	errs := make([]string, len(r.Errors))
	for i, err := range r.Errors {
		errs[i] = err.Error()
	}
	return json.Marshal(struct {
		plain
		Errors []string `json:"errors"`
	}{plain(r), errs})
}

// Reap runs one sweep. It returns an error and no report when the options
// are invalid or a listing failed, since nothing was attempted then. When
// any removal failed it returns the report together with those errors
// joined.
func Reap(ctx context.Context, client *msb.Client, opts Options) (*Report, error) {
	if opts.OlderThan <= 0 {
		return nil, fmt.Errorf("reaper: OlderThan must be a positive duration, got %v", opts.OlderThan)
	}
	if client == nil {
		return nil, errors.New("reaper: nil msb client")
	}
	if err := session.CheckPrefix(opts.Prefix); err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}
	rep, err := reap(ctx, client, opts)
	Record(context.WithoutCancel(ctx), opts.MeterProvider, sweepOf(opts.DryRun, rep, err))
	return rep, err
}

// reap is Reap with its options checked.
func reap(ctx context.Context, client *msb.Client, opts Options) (*Report, error) {
	if opts.Prefix == "" {
		opts.Prefix = session.DefaultPrefix
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// One time for every age of the sweep: with a clock read at each step,
	// a stopped sandbox too young to be inspected could be stale by the
	// time the inspections of others are done, and go uninspected.
	now := opts.Now()

	var sandboxes []msb.Sandbox
	var volumes []msb.Volume
	var snapshots []msb.Snapshot
	var snapshotErr error
	lg, lctx := errgroup.WithContext(ctx)
	lg.Go(func() (err error) {
		sandboxes, err = client.List(lctx, msb.ListOptions{Labels: slices.Concat(session.OwnerLabels(), opts.Labels)})
		if err != nil {
			err = fmt.Errorf("reaper: list sandboxes: %w", err)
		}
		return err
	})
	lg.Go(func() (err error) {
		volumes, err = client.VolumeList(lctx)
		if err != nil {
			err = fmt.Errorf("reaper: list volumes: %w", err)
		}
		return err
	})
	if len(opts.Labels) == 0 {
		lg.Go(func() error {
			snapshots, snapshotErr = client.SnapshotList(lctx)
			return nil
		})
	}
	if err := lg.Wait(); err != nil {
		return nil, err
	}

	s := &sweep{
		client: client,
		log:    opts.Logger,
		now:    now,
		report: &Report{
			DryRun:           opts.DryRun,
			RemovedSandboxes: []string{},
			RemovedVolumes:   []string{},
			RemovedSnapshots: []string{},
			Skipped:          []Skipped{},
			Counts: map[string]Count{
				KindSandbox:  {Listed: len(sandboxes)},
				KindVolume:   {Listed: len(volumes)},
				KindSnapshot: {Listed: len(snapshots)},
			},
		},
	}
	if snapshotErr != nil {
		s.fail(KindSnapshot, fmt.Errorf("reaper: list snapshots: %w", snapshotErr))
	}
	active := s.lastActivity(ctx, opts, sandboxes)
	removals := s.plan(opts, sandboxes, volumes, active)
	removals = append(removals, s.planSnapshots(opts, snapshots)...)
	if opts.DryRun {
		for _, r := range removals {
			if r.sandbox != "" {
				s.removed(KindSandbox, r.sandbox)
			}
			if r.volume != "" {
				s.removed(KindVolume, r.volume)
			}
			if r.snapshot != "" {
				s.removed(KindSnapshot, r.snapshot)
			}
		}
	} else {
		s.run(ctx, removals, opts.Concurrency)
	}
	return s.finish()
}

// removal is one unit of work: a sandbox then its volume, either alone, or
// a snapshot.
type removal struct{ sandbox, volume, snapshot string }

type sweep struct {
	client *msb.Client
	log    *slog.Logger
	now    time.Time // what every age is measured against

	mu     sync.Mutex
	report *Report
}

// lastActivity inspects each sandbox of ours that is stale by its
// creation and returns its updated_at by name (its creation when msb shows
// none): a running one too, since one resumed a moment ago is in use
// again, as much as one paused a moment ago. One whose inspection fails
// gets the zero time and an error in the report (plan keeps it); one that
// is gone is left to its removal, which reports it.
func (s *sweep) lastActivity(ctx context.Context, opts Options, sandboxes []msb.Sandbox) map[string]time.Time {
	var (
		mu     sync.Mutex
		active = map[string]time.Time{}
		g      errgroup.Group
	)
	g.SetLimit(opts.Concurrency)
	for _, sb := range sandboxes {
		if _, ok := session.SandboxStem(opts.Prefix, sb.Name); !ok || s.now.Sub(sb.CreatedAt) < opts.OlderThan {
			continue
		}
		g.Go(func() error {
			info, err := s.client.Inspect(ctx, sb.Name)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && info.UpdatedAt.IsZero():
				active[sb.Name] = sb.CreatedAt // msb showed none: creation is all we know
			case err == nil:
				active[sb.Name] = info.UpdatedAt
			case errors.Is(err, msb.ErrSandboxNotFound):
				active[sb.Name] = sb.CreatedAt
			default:
				active[sb.Name] = time.Time{}
				s.fail(KindSandbox, fmt.Errorf("inspect sandbox %s for its last activity: %w", sb.Name, err))
			}
			return nil
		})
	}
	_ = g.Wait() // every task reports into active and s.report
	return active
}

// plan decides from the listings and the last activities what goes, and
// records what stays.
func (s *sweep) plan(opts Options, sandboxes []msb.Sandbox, volumes []msb.Volume, active map[string]time.Time) []removal {
	// stale reports why a resource stays on age grounds, "" when it is stale.
	stale := func(created time.Time) string {
		if age := s.now.Sub(created); age < opts.OlderThan {
			return fmt.Sprintf("younger than %v (age %v)", opts.OlderThan, age.Round(time.Second))
		}
		return ""
	}

	listed := make(map[string]bool, len(sandboxes))
	pairs := map[string]*removal{} // by stem
	var removals []removal
	for _, sb := range sandboxes {
		listed[sb.Name] = true
		stem, ok := session.SandboxStem(opts.Prefix, sb.Name)
		if !ok {
			s.foreign(KindSandbox)
			continue
		}
		if why := stale(sb.CreatedAt); why != "" {
			s.skip(KindSandbox, sb.Name, why)
			continue
		}
		// Stale by its creation, so lastActivity inspected it.
		last := active[sb.Name]
		if last.IsZero() {
			continue // kept, and counted failed with its error by lastActivity
		}
		if age := s.now.Sub(last); age < opts.OlderThan {
			s.skip(KindSandbox, sb.Name, fmt.Sprintf("%s, last active less than %v ago (%v)", strings.ToLower(sb.Status), opts.OlderThan, age.Round(time.Second)))
			continue
		}
		pairs[stem] = &removal{sandbox: sb.Name}
	}
	for _, v := range volumes {
		stem, ok := session.VolumeStem(opts.Prefix, v.Name)
		if !ok {
			s.foreign(KindVolume)
			continue
		}
		pair := pairs[stem]
		paired := session.NamesFromStem(stem).Sandbox
		why := stale(v.CreatedAt)
		switch {
		case pair == nil && listed[paired]:
			s.skip(KindVolume, v.Name, "its sandbox "+paired+" is kept")
		case pair == nil && len(opts.Labels) > 0:
			// Its sandbox may exist outside the narrowed listing.
			s.foreign(KindVolume)
		case pair == nil && !createdAsNamed(opts.Prefix, stem, v.CreatedAt):
			// Our name form, but not made when its name says: not ours.
			s.foreign(KindVolume)
			s.log.Debug("reaper: not ours", "kind", KindVolume, "name", v.Name, "created_at", v.CreatedAt)
		case why != "":
			s.skip(KindVolume, v.Name, why)
		case pair != nil:
			pair.volume = v.Name
		default:
			removals = append(removals, removal{volume: v.Name})
		}
	}
	for _, p := range pairs {
		removals = append(removals, *p)
	}
	return removals
}

// planSnapshots picks the stale snapshots of ours.
func (s *sweep) planSnapshots(opts Options, snapshots []msb.Snapshot) []removal {
	var removals []removal
	for _, snap := range snapshots {
		stem, ok := session.SnapshotStem(opts.Prefix, snap.Name)
		if !ok || !createdAsNamed(opts.Prefix, stem, snap.CreatedAt) {
			s.foreign(KindSnapshot)
			continue
		}
		if age := s.now.Sub(snap.CreatedAt); age < opts.OlderThan {
			s.skip(KindSnapshot, snap.Name, fmt.Sprintf("younger than %v (age %v)", opts.OlderThan, age.Round(time.Second)))
			continue
		}
		removals = append(removals, removal{snapshot: snap.Name})
	}
	return removals
}

// maxStemSkew is how far an orphan volume's created_at may be from the time
// its name encodes: a session names its volume just before creating it.
const maxStemSkew = time.Hour

// createdAsNamed reports whether a volume created at created is one a
// session made under stem.
func createdAsNamed(prefix, stem string, created time.Time) bool {
	named, ok := session.StemTime(prefix, stem)
	return ok && created.Sub(named).Abs() <= maxStemSkew
}

// run removes with at most limit msb calls at once. A removal whose turn
// comes after ctx ended is not started; those are reported as one error.
func (s *sweep) run(ctx context.Context, removals []removal, limit int) {
	var g errgroup.Group
	g.SetLimit(limit)
	var notStarted atomic.Int64
	for _, r := range removals {
		g.Go(func() error {
			if ctx.Err() != nil {
				notStarted.Add(1)
				s.notStarted(r)
				return nil
			}
			s.remove(ctx, r)
			return nil
		})
	}
	_ = g.Wait() // every task reports into s.report and returns nil
	if n := notStarted.Load(); n > 0 {
		s.addError(fmt.Errorf("reaper: %d removals not started: %w", n, context.Cause(ctx)))
	}
}

func (s *sweep) remove(ctx context.Context, r removal) {
	if r.snapshot != "" {
		err := s.client.SnapshotRemove(ctx, r.snapshot)
		switch {
		case err == nil:
			s.removed(KindSnapshot, r.snapshot)
		case errors.Is(err, msb.ErrSnapshotNotFound):
			s.skip(KindSnapshot, r.snapshot, "already gone")
		default:
			s.fail(KindSnapshot, fmt.Errorf("remove snapshot %s: %w", r.snapshot, err))
		}
		return
	}
	if r.sandbox != "" {
		err := s.client.Remove(ctx, msb.RemoveOptions{Names: []string{r.sandbox}, Force: true})
		switch {
		case err == nil:
			s.removed(KindSandbox, r.sandbox)
		case errors.Is(err, msb.ErrSandboxNotFound):
			s.skip(KindSandbox, r.sandbox, "already gone")
		default:
			s.fail(KindSandbox, fmt.Errorf("remove sandbox %s: %w", r.sandbox, err))
			if r.volume != "" {
				s.skip(KindVolume, r.volume, "its sandbox "+r.sandbox+" could not be removed")
			}
			return
		}
	}
	if r.volume == "" {
		return
	}
	err := s.client.VolumeRemove(ctx, r.volume)
	switch {
	case err == nil:
		s.removed(KindVolume, r.volume)
	case errors.Is(err, msb.ErrVolumeNotFound):
		s.skip(KindVolume, r.volume, "already gone")
	case errors.Is(err, msb.ErrVolumeAttached):
		// A sandbox outside our listing mounts it: in use, not stale.
		s.skip(KindVolume, r.volume, "attached to an active sandbox")
	default:
		s.fail(KindVolume, fmt.Errorf("remove volume %s: %w", r.volume, err))
	}
}

func (s *sweep) removed(kind, name string) {
	s.log.Info("reaper: removed", "kind", kind, "name", name, "dry_run", s.report.DryRun)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch kind {
	case KindSandbox:
		s.report.RemovedSandboxes = append(s.report.RemovedSandboxes, name)
	case KindVolume:
		s.report.RemovedVolumes = append(s.report.RemovedVolumes, name)
	default:
		s.report.RemovedSnapshots = append(s.report.RemovedSnapshots, name)
	}
}

func (s *sweep) skip(kind, name, reason string) {
	s.log.Debug("reaper: kept", "kind", kind, "name", name, "reason", reason)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.report.Skipped = append(s.report.Skipped, Skipped{Name: name, Kind: kind, Reason: reason})
}

// fail records err against a resource of kind.
func (s *sweep) fail(kind string, err error) {
	s.addError(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tally(kind, func(c *Count) { c.Failed++ })
}

func (s *sweep) addError(err error) {
	s.log.Warn("reaper: removal failed", "err", err)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.report.Errors = append(s.report.Errors, err)
}

// notStarted counts the resources of a removal that ctx ended before it
// ran as failed; run reports them all in one error.
func (s *sweep) notStarted(r removal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	failed := func(c *Count) { c.Failed++ }
	if r.sandbox != "" {
		s.tally(KindSandbox, failed)
	}
	if r.volume != "" {
		s.tally(KindVolume, failed)
	}
	if r.snapshot != "" {
		s.tally(KindSnapshot, failed)
	}
}

// foreign counts a listed resource of kind that is not ours.
func (s *sweep) foreign(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tally(kind, func(c *Count) { c.Foreign++ })
}

// tally updates kind's Count; s.mu is held.
func (s *sweep) tally(kind string, update func(*Count)) {
	c := s.report.Counts[kind]
	update(&c)
	s.report.Counts[kind] = c
}

// finish sorts the report, since removals complete in any order, and
// returns it with the removal errors joined.
func (s *sweep) finish() (*Report, error) {
	r := s.report
	slices.Sort(r.RemovedSandboxes)
	slices.Sort(r.RemovedVolumes)
	slices.Sort(r.RemovedSnapshots)
	slices.SortFunc(r.Skipped, func(a, b Skipped) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	slices.SortFunc(r.Errors, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
	s.log.Info("reaper: sweep done", "dry_run", r.DryRun, "removed_sandboxes", len(r.RemovedSandboxes),
		"removed_volumes", len(r.RemovedVolumes), "removed_snapshots", len(r.RemovedSnapshots), "skipped", len(r.Skipped), "errors", len(r.Errors))
	return r, errors.Join(r.Errors...)
}
