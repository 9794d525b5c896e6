//go:build darwin

package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// TestSeatbeltFunctional runs the real sandbox-exec: one write allowed in
// the workspace, one denied outside it and one denied in read-only mode.
func TestSeatbeltFunctional(t *testing.T) {
	ctx := context.Background()
	c := Probe(ctx)
	if c.Backend != "seatbelt" {
		t.Fatalf("Seatbelt not usable:\n%s", c)
	}
	for _, mode := range []Mode{ModeWorkspaceWrite, ModeReadOnly} {
		s, err := Create(ctx, Options{StateDir: t.TempDir(), Policy: Policy{Mode: mode}})
		if err != nil {
			t.Fatal(err)
		}
		outside := filepath.Join(physical(t.TempDir()), "outside")
		res, err := s.Shell(ctx, session.Command{Script: `echo x > in; echo x > "$1"; true`, Args: []string{outside}}, session.ShellOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, inErr := os.Stat(filepath.Join(s.Paths().Workspace, "in"))
		if mode == ModeWorkspaceWrite && inErr != nil || mode == ModeReadOnly && inErr == nil {
			t.Errorf("%s: workspace write result wrong (%v); stderr %q", mode, inErr, res.Stderr)
		}
		if _, err := os.Stat(outside); err == nil {
			t.Errorf("%s: wrote outside the workspace", mode)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
