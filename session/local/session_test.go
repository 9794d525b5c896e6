//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/session"
)

func TestShellBasics(t *testing.T) {
	s := newTestSession(t, Options{WorkspaceID: "ws", SessionID: "basics"})
	res := sh(t, s, `echo "$1|$2"; echo err >&2; id -u; pwd; echo "$HOME"; exit 7`, "a b", "c")
	if res.ExitCode != 7 {
		t.Fatalf("exit %d, want 7; stderr %q", res.ExitCode, res.Stderr)
	}
	want := "a b|c\n65534\n/workspace\n/workspace\n"
	if string(res.Stdout) != want || string(res.Stderr) != "err\n" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	p := s.Paths()
	if p.Workspace != "/workspace" || p.Uploads != "/mnt/session/uploads" || p.Outputs != "/mnt/session/outputs" || p.Skills != "/workspace/skills" {
		t.Fatalf("paths %+v", p)
	}
}

func TestCopyInAndAttach(t *testing.T) {
	dir := t.TempDir()
	s := newTestSession(t, Options{StateDir: dir})
	src := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(src, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, g := range []string{"/workspace/a/b/f.txt", "/mnt/session/uploads/u/f.txt", "/workspace/skills/s/f.txt"} {
		if err := s.CopyIn(ctx, src, g); err != nil {
			t.Fatalf("CopyIn %s: %v", g, err)
		}
	}
	res := sh(t, s, `cat /workspace/a/b/f.txt /mnt/session/uploads/u/f.txt; echo; stat -c %u /workspace/a/b/f.txt /mnt/session/uploads/u/f.txt /workspace/skills/s/f.txt; echo x > /mnt/session/uploads/u/g 2>/dev/null || echo denied`)
	if got := string(res.Stdout); got != "hellohello\n65534\n0\n0\ndenied\n" {
		t.Fatalf("got %q (stderr %q)", got, res.Stderr)
	}
	a, err := Attach(ctx, dir, s.Name())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if got := string(sh(t, a, `cat a/b/f.txt`).Stdout); got != "hello" {
		t.Fatalf("attached read %q", got)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(ctx, dir, s.Name()); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Attach after close: %v", err)
	}
	if _, err := s.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{}); err == nil {
		t.Fatal("Shell on a removed session succeeded")
	}
	if !strings.HasPrefix(s.Name(), "oma-local-") {
		t.Fatalf("name %q", s.Name())
	}
}
