package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oma-sandbox/oma-sandbox/reaper"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
)

// localReapReport is the JSON form of local.ReapReport.
type localReapReport struct {
	DryRun  bool     `json:"dry_run"`
	Removed []string `json:"removed"`
	Kept    []string `json:"kept"`
	Errors  []string `json:"errors"`
}

func runReap(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("reap", "--older-than DUR [--dry-run] [--json] [--prefix P] [--concurrency N] [--backend msb|local|all]\n       [--metrics-file PATH]", `Removes stale sessions: msb sandboxes and volumes of ours (found from msb's
own listings, see docs/reaper.md), and local sessions of the state directory
(--backend local or all), created at least --older-than ago. Meant for cron.

With --json the report is printed as JSON: the msb report of docs/reaper.md
for --backend msb, {dry_run, removed, kept, errors} for local, and
{"msb": ..., "local": ...} for all (msb is null there when its binary is not
found or its listing failed; the local sessions are reaped either way).
With --metrics-file the sweep's figures are also written to PATH in the
Prometheus text format, for node_exporter's textfile collector
(docs/operations.md), whether or not the sweep failed; the file is replaced
atomically. Exit status: 0 when every attempted removal succeeded, 1 when a
listing or any removal failed (the other removals still run) or the metrics
file could not be written.`)
	olderThan := fs.Duration("older-than", 0, "required: resources at least this old are stale (90m, 2h, 36h)")
	dryRun := fs.Bool("dry-run", false, "report what would be removed; remove nothing")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	prefix := fs.String("prefix", "", "msb: the name `prefix` sessions were created with (default oma)")
	concurrency := fs.Int("concurrency", reaper.DefaultConcurrency, "msb: removals run at once")
	backend := fs.String("backend", backendMsb, "`backend` to reap: msb, local or all")
	metricsPath := fs.String("metrics-file", "", "also write the sweep's figures to `PATH` in the Prometheus text format (a .prom file in the textfile collector's directory)")
	rest, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	set := setFlags(fs)
	switch {
	case len(rest) > 0:
		return &usageError{msg: fmt.Sprintf("reap takes no arguments, got %q", rest), usage: usage(fs)}
	case !set["older-than"]:
		return &usageError{msg: "reap needs --older-than DUR", usage: usage(fs)}
	case *olderThan <= 0:
		return &usageError{msg: fmt.Sprintf("--older-than %v: want a positive duration", *olderThan)}
	case *concurrency < 1:
		return &usageError{msg: fmt.Sprintf("--concurrency %d: want at least 1", *concurrency)}
	case *backend != backendMsb && *backend != backendLocal && *backend != backendAll:
		return &usageError{msg: fmt.Sprintf("--backend %q: want msb, local or all", *backend)}
	case *backend == backendLocal && (set["prefix"] || set["concurrency"]):
		return &usageError{msg: "--prefix and --concurrency apply to the msb backend only"}
	case set["metrics-file"] && *metricsPath == "":
		return &usageError{msg: "--metrics-file needs a PATH"}
	}
	if err := session.CheckPrefix(*prefix); err != nil {
		return &usageError{msg: "--" + err.Error()}
	}
	var metrics *metricsFile
	if *metricsPath != "" {
		if metrics, err = openMetricsFile(*metricsPath); err != nil {
			return err
		}
		defer metrics.discard()
	}

	run := &reapRun{dryRun: *dryRun}
	began := time.Now()
	msbRep, localRep, sweepErr := c.sweep(ctx, run, *backend, reaper.Options{
		OlderThan: *olderThan, Prefix: *prefix, DryRun: *dryRun, Concurrency: *concurrency, Logger: c.logger,
	})
	run.took = time.Since(began)
	// The metrics are written whatever the sweep's outcome, before the exit
	// status is decided: a failed sweep is what an alert on them is for.
	var metricsErr error
	if metrics != nil {
		metricsErr = metrics.commit(run, time.Now())
	}
	if msbRep == nil && localRep == nil && sweepErr != nil {
		return errors.Join(sweepErr, metricsErr)
	}

	switch {
	case *asJSON && *backend == backendMsb:
		err = writeJSON(c.stdout, msbRep)
	case *asJSON && *backend == backendLocal:
		err = writeJSON(c.stdout, localRep)
	case *asJSON:
		err = writeJSON(c.stdout, struct {
			Msb   *reaper.Report   `json:"msb"`
			Local *localReapReport `json:"local"`
		}{msbRep, localRep})
	default:
		c.printReap(msbRep, localRep, *dryRun)
	}
	switch {
	case err != nil:
		return err
	case sweepErr != nil, metricsErr != nil:
		return errors.Join(sweepErr, metricsErr)
	case !run.ok():
		return exitCode(exitFailure)
	}
	return nil
}

// sweep reaps the backends that backend names, recording each sweep's
// figures in run. A sweep that failed before it could report anything (a
// listing failed) has no report and its error is returned; the other
// backend is swept all the same.
func (c *cli) sweep(ctx context.Context, run *reapRun, backend string, opts reaper.Options) (*reaper.Report, *localReapReport, error) {
	var msbRep *reaper.Report
	var msbErr error
	if backend == backendMsb || backend == backendAll && c.msbInstalled() {
		rep, err := reaper.Reap(ctx, c.client(), opts)
		run.backends = append(run.backends, msbSweep(rep, err))
		if rep == nil {
			msbErr = fmt.Errorf("reap msb: %w", err)
		}
		msbRep = rep
	}
	if backend == backendMsb {
		return msbRep, nil, msbErr
	}
	rep, err := local.Reap(ctx, c.stateDir, opts.OlderThan, time.Now(), opts.DryRun)
	counted := err == nil || len(rep.Failed) > 0
	run.backends = append(run.backends, localSweep(rep, err, counted))
	reaper.Record(context.WithoutCancel(ctx), opts.MeterProvider, reaper.Sweep{Backend: backendLocal, DryRun: opts.DryRun, OK: err == nil,
		Removed: map[string]int{kindSession: len(rep.Removed)}, Failed: map[string]int{kindSession: len(rep.Failed)}})
	if !counted {
		return msbRep, nil, errors.Join(msbErr, fmt.Errorf("reap local: %w", err))
	}
	localRep := &localReapReport{DryRun: opts.DryRun, Removed: nonNil(rep.Removed), Kept: nonNil(rep.Kept), Errors: []string{}}
	for _, f := range rep.Failed {
		localRep.Errors = append(localRep.Errors, fmt.Sprintf("%s: %v", f.Name, f.Err))
	}
	return msbRep, localRep, msbErr
}

func (c *cli) printReap(m *reaper.Report, l *localReapReport, dryRun bool) {
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	if m != nil {
		for _, n := range m.RemovedSandboxes {
			fmt.Fprintf(c.stdout, "%s msb sandbox %s\n", verb, n)
		}
		for _, n := range m.RemovedVolumes {
			fmt.Fprintf(c.stdout, "%s msb volume %s\n", verb, n)
		}
		for _, n := range m.RemovedSnapshots {
			fmt.Fprintf(c.stdout, "%s msb snapshot %s\n", verb, n)
		}
		for _, s := range m.Skipped {
			fmt.Fprintf(c.stdout, "kept msb %s %s: %s\n", s.Kind, s.Name, s.Reason)
		}
		for _, err := range m.Errors {
			fmt.Fprintf(c.stderr, "oma-sandbox: reap msb: %v\n", err)
		}
	}
	if l != nil {
		for _, n := range l.Removed {
			fmt.Fprintf(c.stdout, "%s local session %s\n", verb, n)
		}
		for _, n := range l.Kept {
			fmt.Fprintf(c.stdout, "kept local session %s\n", n)
		}
		for _, e := range l.Errors {
			fmt.Fprintf(c.stderr, "oma-sandbox: reap local: %s\n", e)
		}
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
