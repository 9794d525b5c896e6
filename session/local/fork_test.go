//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// TestForkDiverges: a file written before the fork is in both; changed
// differently in each, each sees only its own change; the fork names its
// parent; a guest symlink to a host file is copied as a link and the host
// file's content never lands in the fork; closing one leaves the other
// working; nothing is left after both close.
func TestForkDiverges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := Create(ctx, Options{StateDir: dir, WorkspaceID: "ws", SessionID: "src"})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, src, `mkdir -p d && printf base >d/note.txt && ln -s "$1" leak`, secret)

	fork, err := src.Fork(ctx, ForkOptions{SessionID: "fork"})
	if err != nil {
		t.Fatal(err)
	}
	if fork.Parent() != src.Name() || fork.Name() == src.Name() {
		t.Fatalf("fork %s has parent %q, want %s", fork.Name(), fork.Parent(), src.Name())
	}
	// Attach reads the parent back from the record.
	again, err := Attach(ctx, dir, fork.Name())
	if err != nil || again.Parent() != src.Name() {
		t.Fatalf("attached fork: parent %q, err %v", again.Parent(), err)
	}
	target, err := os.Readlink(filepath.Join(fork.dirs.Workspace, "leak"))
	if err != nil || target != secret {
		t.Fatalf("fork's leak: %q, %v; want a link to %s", target, err, secret)
	}

	sh(t, src, `printf ' src' >>d/note.txt`)
	sh(t, fork, `printf ' fork' >>d/note.txt`)
	if got := string(sh(t, src, `cat d/note.txt`).Stdout); got != "base src" {
		t.Errorf("source reads %q", got)
	}
	if got := string(sh(t, fork, `cat d/note.txt`).Stdout); got != "base fork" {
		t.Errorf("fork reads %q", got)
	}

	if err := src.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := string(sh(t, fork, `cat d/note.txt`).Stdout); got != "base fork" {
		t.Errorf("fork reads %q after the source closed", got)
	}
	if _, err := src.Fork(ctx, ForkOptions{SessionID: "late"}); err == nil {
		t.Error("a closed session forked")
	}
	if err := fork.Close(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("left in the state directory after both closed: %v", left)
	}
	if data, _ := os.ReadFile(secret); string(data) != "host secret" {
		t.Errorf("host file changed: %q", data)
	}
}

func TestForkNeedsASessionID(t *testing.T) {
	dir := t.TempDir()
	s := newTestSession(t, Options{StateDir: dir})
	if _, err := s.Fork(context.Background(), ForkOptions{}); err == nil {
		t.Fatal("forked without a session id")
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("state directory holds %d entries, want the source's only", len(left))
	}
}

// A guest that spends nothing (a sparse file with three more names) does
// not make a fork write its apparent size: the fork's workspace holds one
// inode with four names and its holes.
func TestForkKeepsHolesAndHardLinks(t *testing.T) {
	ctx := context.Background()
	src := newTestSession(t, Options{StateDir: t.TempDir()})
	sh(t, src, `truncate -s 256M f && printf end >>f && ln f l1 && ln f l2 && mkdir d && ln f d/l3`)
	fork, err := src.Fork(ctx, ForkOptions{SessionID: "fork"})
	if err != nil {
		t.Fatal(err)
	}
	defer fork.Close(ctx)
	var blocks int64
	seen := map[uint64]bool{}
	err = filepath.WalkDir(fork.dirs.Workspace, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFREG && !seen[st.Ino] {
			seen[st.Ino] = true
			blocks += st.Blocks
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || blocks*512 > 1<<20 {
		t.Fatalf("the fork holds %d inodes taking %d bytes, want one sparse file", len(seen), blocks*512)
	}
	if got := string(sh(t, fork, `stat -c '%h %s' d/l3; tail -c 3 l1`).Stdout); got != "4 268435459\nend" {
		t.Fatalf("the fork's file: %q", got)
	}
}

// TestForkOfASessionBeingRemoved: a fork whose source another process
// removes while it copies (the removal's mark is there, files go) is not
// passed off as a copy of the workspace: it fails with ErrGone and
// leaves no session.
func TestForkOfASessionBeingRemoved(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src, err := Create(ctx, Options{StateDir: dir, WorkspaceID: "ws", SessionID: "src"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close(ctx)
	for _, name := range []string{"a.txt", "b.txt"} {
		if err := os.WriteFile(filepath.Join(src.dirs.Workspace, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	real := copyWorkspace
	t.Cleanup(func() { copyWorkspace = real })
	copyWorkspace = func(ctx context.Context, from, to string, limit int64) ([]string, error) {
		// Another process's removal has begun, and taken a file already.
		markRemoving(src.dirs.Root)
		if err := os.Remove(filepath.Join(from, "b.txt")); err != nil {
			t.Fatal(err)
		}
		return real(ctx, from, to, limit)
	}
	fork, err := src.Fork(ctx, ForkOptions{SessionID: "fork"})
	if !errors.Is(err, session.ErrGone) {
		t.Errorf("Fork of a session being removed = %v, want ErrGone", err)
	}
	if fork != nil {
		fork.Close(ctx)
	}
	infos, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.SessionID == "fork" {
			t.Errorf("the failed fork %s is left", in.Name)
		}
	}
}
