//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/session/local"
)

// TestCreateFlagsPerBackend: a flag of the other backend is a usage error
// that names it and says how the backend was chosen, and creates nothing;
// --cpus and --memory size either backend, a local session as its memory
// limit (and CPU quota), but not beside the same --limit; none of them
// goes with mcp --attach, which shapes no session.
func TestCreateFlagsPerBackend(t *testing.T) {
	state := t.TempDir()
	global := []string{"--state-dir", state, "--msb", fakemsbtest.New(t).Bin}
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		var out, errs bytes.Buffer
		if code := Main(slices.Concat(global, args), nil, &out, &errs); code != want {
			t.Fatalf("%q exited %d, want %d; stderr:\n%s", args, code, want, errs.String())
		}
		return strings.TrimSpace(out.String()), errs.String()
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--backend", "local", "--image", "debian"}, "--image does not apply to the local backend, which was given"},
		{[]string{"--backend", "local", "--idle-timeout", "5m"}, "--idle-timeout does not apply to the local backend"},
		{[]string{"--backend", "msb", "--limit", "memory=64M"}, "--limit does not apply to the msb backend, which was given"},
		{[]string{"--backend", "msb", "--mode", "read-only"}, "--mode does not apply to the msb backend"},
		{[]string{"--backend", "local", "--memory", "96M", "--limit", "memory=64M"}, "--memory and --limit memory= both size the local session"},
		{[]string{"--backend", "local", "--cpus", "2", "--limit", "cpu=0.5"}, "--cpus and --limit cpu= both size the local session"},
		{[]string{"--backend", "local", "--memory", "lots"}, "--memory: "},
		{[]string{"--backend", "local", "--cpus", "256"}, "--cpus 256: want 1 to 255"},
	} {
		_, errs := run(2, append([]string{"session", "create"}, c.args...)...)
		if !strings.Contains(errs, c.says) {
			t.Errorf("%q: stderr %q, want %q", c.args, errs, c.says)
		}
	}
	for _, flag := range []string{"--memory=1G", "--cpus=2", "--image=debian", "--limit=memory=64M"} {
		_, errs := run(2, "mcp", "--attach", "oma-local-x", flag)
		if name, _, _ := strings.Cut(flag, "="); !strings.Contains(errs, name+" shapes a new session and cannot go with --attach") {
			t.Errorf("mcp --attach with %s: stderr %q", flag, errs)
		}
	}
	if left, _ := os.ReadDir(state); len(left) > 0 {
		t.Errorf("refused creates left %v", left)
	}

	caps := local.Probe(context.Background())
	if caps.Backend == "" || caps.Limits[local.LimitMemory].Evidence != local.EvidenceFull || caps.Limits[local.LimitCPU].Evidence != local.EvidenceFull {
		t.Skip("this host cannot enforce a local session's memory and CPU limits")
	}
	name, _ := run(0, "session", "create", "--backend", "local", "--cpus", "1", "--memory", "96M")
	defer run(0, "session", "rm", name)
	run(0, "tool", name, "bash", `{"command":"true"}`)
	stats, _ := run(0, "session", "stats", name)
	if !strings.Contains(stats, "memory_limit_bytes\t100663296") {
		t.Errorf("stats of a session created with --memory 96M:\n%s", stats)
	}
}
