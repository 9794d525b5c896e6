package reaper

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/internal/realmsb"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// foreignVolumes are volumes a sweep must leave whatever their age: a name
// only shaped like ours, a name longer than we would ever make (msb 0.6.18
// accepts up to 250 bytes), and a name of our exact grammar whose volume was
// not created when the name says.
func foreignVolumes(created time.Time) []string {
	return []string{
		"oma-postgres-data-backup-workspace",
		strings.Repeat("v", 200),
		names(session.DefaultPrefix, 7, created.Add(-48*time.Hour)).Volume,
	}
}

func TestReapLeavesForeignVolumes(t *testing.T) {
	f := newFakeRunner()
	old := now.Add(-48 * time.Hour)
	for _, v := range foreignVolumes(old) {
		f.addVolume(v, old)
	}
	ours := names(session.DefaultPrefix, 1, old).Volume
	f.addVolume(ours, old)
	pair := f.addSession(2, old)

	r, err := Reap(t.Context(), msb.NewClient(f), Options{OlderThan: 24 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "removed volumes", r.RemovedVolumes, []string{ours, pair.Volume})
	equal(t, "removed sandboxes", r.RemovedSandboxes, []string{pair.Sandbox})
	equal(t, "volumes left", f.volumeNames(), foreignVolumes(old))
}

// TestReapRealMsbForeignVolumes runs a sweep against the real msb (volumes
// and listings need no VM): foreign volumes stay, an orphan of ours goes.
func TestReapRealMsbForeignVolumes(t *testing.T) {
	env := realmsb.New(t)
	client := msb.NewClient(&msb.CLI{Path: env.Bin, Env: env.Environ()})
	ctx := t.Context()
	created := time.Now()
	ours := session.NewNames(session.DefaultPrefix, "ws", "s", created, 1).Volume
	foreign := foreignVolumes(created)
	for _, v := range append([]string{ours}, foreign...) {
		// VolumeCreate validates the name as we would; the foreign one of
		// 200 bytes is created the way another tool would, through msb.
		if _, err := (&msb.CLI{Path: env.Bin, Env: env.Environ()}).Run(ctx, msb.Call{Args: []string{"volume", "create", v}}); err != nil {
			t.Fatal(err)
		}
	}
	later := func() time.Time { return created.Add(48 * time.Hour) }
	r, err := Reap(ctx, client, Options{OlderThan: 24 * time.Hour, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "removed volumes", r.RemovedVolumes, []string{ours})
	vols, err := client.VolumeList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, v := range vols {
		left = append(left, v.Name)
	}
	equal(t, "volumes left", left, foreign)
	if b, err := json.Marshal(r); err != nil || len(r.Errors) != 0 {
		t.Errorf("report %s, %v", b, err)
	}
}
