package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// Info describes one session in a state directory.
type Info struct {
	Name        string
	WorkspaceID string
	SessionID   string
	CreatedAt   time.Time
	Policy      Policy
	Limits      Limits
	Dir         string // the session's state directory on the host
	// State is session.StatePaused (session pause), StateRunning (its
	// resident sandbox runs: the agent and what calls left running) or
	// StateIdle (nothing of it runs; the next call starts its sandbox),
	// whichever process made it so.
	State string
}

// List returns the sessions of a state directory, oldest first. Entries
// that are not sessions are skipped; a missing state directory is empty.
func List(stateDir string) ([]Info, error) {
	stateDir, err := resolveStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	if err := privateStateDir(stateDir); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, e := range ents {
		if !e.IsDir() || msb.ValidateName("session name", e.Name()) != nil {
			continue
		}
		dir := filepath.Join(stateDir, e.Name())
		rec, err := readRecord(dir)
		if err != nil || rec.Name != e.Name() {
			continue
		}
		out = append(out, Info{Name: rec.Name, WorkspaceID: rec.WorkspaceID, SessionID: rec.SessionID,
			CreatedAt: rec.CreatedAt, Policy: rec.Policy, Limits: rec.Limits, Dir: dir, State: stateOf(dir)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// stateOf is the state of the session whose state directory is root, as
// List reports it.
func stateOf(root string) string {
	if marked(root, pausedFile) {
		return session.StatePaused
	}
	if _, ok := runningResident(root); ok {
		return session.StateRunning
	}
	return session.StateIdle
}

// ReapReport says what Reap removed (or, in a dry run, would remove).
type ReapReport struct {
	Removed []string // session names; orphans (no readable record) too
	Kept    []string // younger than the cutoff
	Failed  []ReapFailure
}

// ReapFailure is one removal that failed.
type ReapFailure struct {
	Name string
	Err  error
}

// Reap removes the sessions of a state directory created more than
// olderThan before now (paused ones: paused more than olderThan before
// now, as the msb reaper ages a stopped sandbox), with their cgroups, and the leftovers of sessions
// whose creation failed half-way (aged by their directory's time). It is
// the local counterpart of reaping stale msb sandboxes; a session still in
// use by another process has its running calls killed and loses its state.
// A session whose removal fails stays listed, and the next Reap retries it.
func Reap(ctx context.Context, stateDir string, olderThan time.Duration, now time.Time, dryRun bool) (ReapReport, error) {
	var rep ReapReport
	if olderThan < 0 {
		return rep, &PolicyError{Field: "reap age", Value: olderThan.String(), Reason: "must not be negative"}
	}
	stateDir, err := resolveStateDir(stateDir)
	if err != nil {
		return rep, err
	}
	if err := privateStateDir(stateDir); err != nil {
		return rep, err
	}
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	cutoff := now.Add(-olderThan)
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || msb.ValidateName("session name", e.Name()) != nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, errors.Join(append(errs, fmt.Errorf("reap interrupted: %w", session.ErrAborted))...)
		}
		dir := filepath.Join(stateDir, e.Name())
		created, ok := sessionTime(dir)
		if !ok || !created.Before(cutoff) {
			rep.Kept = append(rep.Kept, e.Name())
			continue
		}
		if !dryRun {
			if err := removeSession(dir); err != nil {
				rep.Failed = append(rep.Failed, ReapFailure{Name: e.Name(), Err: err})
				errs = append(errs, fmt.Errorf("local sandbox %s: %w", e.Name(), err))
				continue
			}
		}
		rep.Removed = append(rep.Removed, e.Name())
	}
	return rep, errors.Join(errs...)
}

// sessionTime is when a session was last active, as the msb reaper ages
// a sandbox: the latest of its creation from its record (its directory's
// time when the record is missing or unreadable), its pause when it is
// paused (a paused session runs nothing) and its last resume (one resumed
// a moment ago is in use again). The marks are the host's, in a directory
// no guest reaches.
func sessionTime(dir string) (time.Time, bool) {
	var t time.Time
	if rec, err := readRecord(dir); err == nil {
		t = rec.CreatedAt
	} else if fi, err := os.Stat(dir); err == nil {
		t = fi.ModTime()
	} else {
		return time.Time{}, false
	}
	for _, mark := range []string{pausedFile, resumedFile} {
		if fi, err := os.Lstat(filepath.Join(dir, mark)); err == nil && fi.ModTime().After(t) {
			t = fi.ModTime()
		}
	}
	return t, true
}
