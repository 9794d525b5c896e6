//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestListAndReap(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	old, err := Create(ctx, Options{StateDir: dir, WorkspaceID: "w", SessionID: "old", Limits: Limits{Processes: 32}})
	if err != nil {
		t.Fatal(err)
	}
	// A call that never finished leaves the session's cgroup behind.
	g, err := latestCgroups().create(old.dirs.Root, old.Name(), "call", Limits{Processes: 32}, false)
	if err != nil {
		t.Fatal(err)
	}
	young, err := Create(ctx, Options{StateDir: dir, WorkspaceID: "w", SessionID: "young"})
	if err != nil {
		t.Fatal(err)
	}
	defer young.Close(ctx)
	// A half-created session: a directory without a record.
	orphan := filepath.Join(dir, "oma-local-w-orphan-0-0")
	if err := os.Mkdir(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	// Something that is not a session is never touched.
	if err := os.Mkdir(filepath.Join(dir, ".keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	infos, err := List(dir)
	if err != nil || len(infos) != 2 || infos[0].Name != old.Name() || infos[1].SessionID != "young" {
		t.Fatalf("List: %v %+v", err, infos)
	}
	cgroups, _ := os.ReadFile(filepath.Join(old.dirs.Root, cgroupFile))
	if len(cgroups) == 0 {
		t.Fatal("no cgroup recorded for a limited session")
	}

	// Backdate the old session and the orphan.
	rec, _ := readRecord(old.dirs.Root)
	rec.CreatedAt = rec.CreatedAt.Add(-2 * time.Hour)
	if err := createRecord(old.dirs.Root, rec); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(orphan, past, past); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rep, err := Reap(ctx, dir, time.Hour, now, true)
	if err != nil || len(rep.Removed) != 2 || !exists(old.dirs.Root) {
		t.Fatalf("dry run: %v %+v", err, rep)
	}
	rep, err = Reap(ctx, dir, time.Hour, now, false)
	if err != nil || !slices.Contains(rep.Removed, old.Name()) || !slices.Contains(rep.Removed, filepath.Base(orphan)) ||
		!slices.Equal(rep.Kept, []string{young.Name()}) {
		t.Fatalf("reap: %v %+v", err, rep)
	}
	for _, p := range append([]string{old.dirs.Root, orphan, g.dirs["pids"]}, strings.Fields(string(cgroups))...) {
		if exists(p) {
			t.Errorf("%s survived the reap", p)
		}
	}
	if !exists(filepath.Join(dir, ".keep")) || !exists(young.dirs.Root) {
		t.Fatal("reap removed what it must keep")
	}
	if _, err := Reap(ctx, dir, -time.Second, now, false); err == nil {
		t.Fatal("negative age accepted")
	}
	_ = old.Close(ctx) // already reaped: nothing left to remove
}

// A paused session is aged from its pause, and a resumed one from its
// resume, as the msb reaper ages a sandbox from its last activity: one
// created long ago but paused or resumed just now is kept; one paused long
// ago goes.
func TestReapAgesAPausedSessionFromItsPause(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Create(ctx, Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	rec, _ := readRecord(s.dirs.Root)
	rec.CreatedAt = rec.CreatedAt.Add(-3 * time.Hour)
	if err := createRecord(s.dirs.Root, rec); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rep, err := Reap(ctx, dir, 2*time.Hour, now, false)
	if err != nil || !slices.Equal(rep.Kept, []string{s.Name()}) || !exists(s.dirs.Root) {
		t.Fatalf("a session created 3h ago and paused just now, reaped at 2h: %v %+v", err, rep)
	}
	long := now.Add(-150 * time.Minute)
	if err := os.Chtimes(filepath.Join(s.dirs.Root, pausedFile), long, long); err != nil {
		t.Fatal(err)
	}
	// Resumed, it is in use again: aged from its resume.
	if err := s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	now = time.Now()
	rep, err = Reap(ctx, dir, 2*time.Hour, now, false)
	if err != nil || !slices.Equal(rep.Kept, []string{s.Name()}) || !exists(s.dirs.Root) {
		t.Fatalf("a session created 3h ago, paused and resumed just now, reaped at 2h: %v %+v", err, rep)
	}
	if err := s.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	for _, mark := range []string{pausedFile, resumedFile} {
		if err := os.Chtimes(filepath.Join(s.dirs.Root, mark), long, long); err != nil {
			t.Fatal(err)
		}
	}
	rep, err = Reap(ctx, dir, 2*time.Hour, now, false)
	if err != nil || !slices.Equal(rep.Removed, []string{s.Name()}) || exists(s.dirs.Root) {
		t.Fatalf("a session paused 2.5h ago, reaped at 2h: %v %+v", err, rep)
	}
}
