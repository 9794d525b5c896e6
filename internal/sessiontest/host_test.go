package sessiontest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Poison follows the Session contract: the session refuses every later
// call with ErrPoisoned, and its files stay until Close.
func TestPoisonKeepsFiles(t *testing.T) {
	ctx := context.Background()
	h := NewHost(t)
	if _, err := h.Shell(ctx, session.Command{Script: "echo kept > notes.txt"}, session.ShellOptions{}); err != nil {
		t.Fatal(err)
	}
	err := h.Poison(ctx, errors.New("cleanup failed"))
	if !errors.Is(err, session.ErrPoisoned) {
		t.Fatalf("Poison returned %v, want ErrPoisoned", err)
	}
	if !h.Poisoned() {
		t.Error("Poisoned() is false after Poison")
	}
	if _, err := h.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{}); !errors.Is(err, session.ErrPoisoned) {
		t.Errorf("Shell after Poison returned %v, want ErrPoisoned", err)
	}
	if err := h.CopyIn(ctx, "/etc/hostname", filepath.Join(h.Paths().Workspace, "x")); !errors.Is(err, session.ErrPoisoned) {
		t.Errorf("CopyIn after Poison returned %v, want ErrPoisoned", err)
	}
	if data, err := os.ReadFile(filepath.Join(h.Paths().Workspace, "notes.txt")); err != nil || string(data) != "kept\n" {
		t.Errorf("the workspace file after Poison: %q, %v", data, err)
	}
	if err := h.Close(ctx); err != nil {
		t.Errorf("Close after Poison: %v", err)
	}
}
