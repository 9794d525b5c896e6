//go:build linux

package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type inspected struct {
	UpdatedAt string `json:"updated_at"`
	Config    struct {
		Resources resources `json:"resources"`
	} `json:"config"`
	Active *struct {
		Resources resources `json:"resources"`
	} `json:"active_config"`
	Pending []pendingChange `json:"pending_changes"`
}

func (f *fx) inspectDoc(name string) inspected {
	f.t.Helper()
	var d inspected
	require.NoError(f.t, json.Unmarshal([]byte(f.ok("inspect", name, "--format", "json").stdout), &d))
	return d
}

// TestModifyRunning: a running sandbox takes a change live within what it
// booted with, refuses more unless told to restart or wait for the next
// start, and each applied change moves updated_at.
func TestModifyRunning(t *testing.T) {
	f := newFx(t)
	f.env = []string{"FAKEMSB_NOW=2026-01-01T00:00:00Z"}
	f.ok("create", "alpine", "--name", "box", "-q", "--cpus", "2", "--memory", "1G")
	f.env = []string{"FAKEMSB_NOW=2026-01-01T01:00:00Z"}
	r := f.ok("modify", "box", "--cpus", "1", "--memory", "512M")
	assert.Equal(t, "   ✓ Modified     box\n", r.stderr)
	d := f.inspectDoc("box")
	assert.Equal(t, resources{1, 512, 2, 1024}, d.Config.Resources)
	assert.Equal(t, resources{1, 512, 2, 1024}, d.Active.Resources)
	assert.Equal(t, "2026-01-01T01:00:00+00:00", d.UpdatedAt)

	f.env = []string{"FAKEMSB_NOW=2026-01-01T02:00:00Z"}
	r = f.run("modify", "box", "--cpus", "3")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "error: cannot modify \"box\" without a restart\n  → cpus requires restart: 1 -> 3\n  → max_cpus requires restart: 2 -> 3\n"+
		"  → no changes were applied\n  → run `msb modify box --cpus 3 --restart` to apply now\n  → run `msb modify box --cpus 3 --next-start` to save for the next start\n", r.stderr)
	assert.Equal(t, "2026-01-01T01:00:00+00:00", f.inspectDoc("box").UpdatedAt, "a refused modify moved updated_at")

	f.ok("modify", "box", "--cpus", "3", "--next-start")
	d = f.inspectDoc("box")
	assert.Equal(t, 3, d.Config.Resources.CPUs)
	assert.Equal(t, 1, d.Active.Resources.CPUs, "--next-start touched the running guest")
	assert.Equal(t, []pendingChange{{"cpus", "1", "3", "requires restart"}, {"max_cpus", "2", "3", "requires restart"}}, d.Pending)
	f.ok("modify", "box", "--memory", "2G", "--next-start")
	assert.Equal(t, []pendingChange{{"cpus", "1", "3", "requires restart"}, {"max_cpus", "2", "3", "requires restart"},
		{"memory", "512 MiB", "2 GiB", "requires restart"}, {"max_memory", "1 GiB", "2 GiB", "requires restart"}}, f.inspectDoc("box").Pending)

	r = f.ok("modify", "box", "--cpus", "4", "--restart")
	assert.Equal(t, "   ✓ Modified     box\n   ✓ Restarted    box\n", r.stderr)
	d = f.inspectDoc("box")
	assert.Equal(t, resources{4, 2048, 4, 2048}, d.Active.Resources)
	assert.Empty(t, d.Pending, "a restart left changes pending")

	f.env = []string{"FAKEMSB_NOW=2026-01-01T03:00:00Z"}
	f.ok("modify", "box", "--cpus", "4")
	assert.Equal(t, "2026-01-01T02:00:00+00:00", f.inspectDoc("box").UpdatedAt, "a modify that changes nothing moved updated_at")
}
