//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// TestRemovedUnderACall: another process removes the session (session rm,
// the reaper) while a bash call runs in its resident sandbox. The call
// ends with ErrGone, not a broken channel nor a failed kill; it poisons
// nothing and starts no sandbox of its own over the box being removed;
// the next call is ErrGone too.
func TestRemovedUnderACall(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Create(ctx, Options{StateDir: dir, WorkspaceID: "ws-gone"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	defer s.Close(ctx)
	other, err := Attach(ctx, dir, s.Name())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	tb := tools.New(s, tools.Options{})
	done := make(chan error, 1)
	go func() {
		_, err := tb.Call(ctx, "bash", json.RawMessage(`{"command":"touch started; sleep 30"}`), nil)
		done <- err
	}()
	awaitFile(t, filepath.Join(s.dirs.Workspace, "started"))
	if err := other.Close(ctx); err != nil {
		t.Fatalf("session rm from another process: %v", err)
	}
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the call outlived its session's removal")
	}
	if !errors.Is(err, session.ErrGone) {
		t.Errorf("the call under the removal: %v, want ErrGone", err)
	}
	for _, word := range []string{"kill", "broken", "poison", "could not start"} {
		if err != nil && strings.Contains(err.Error(), word) {
			t.Errorf("the call under the removal says %q: %v", word, err)
		}
	}
	if s.Poisoned() {
		t.Error("a removed session is not poisoned")
	}
	if _, err := tb.Call(ctx, "bash", json.RawMessage(`{"command":"true"}`), nil); !errors.Is(err, session.ErrGone) {
		t.Errorf("the next call: %v, want ErrGone", err)
	}
	if _, err := os.Lstat(s.dirs.Root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the session's directory is left: %v", err)
	}
	noProcs(t, s.Name())
}

// TestCallOfASessionBeingRemoved: once another process has begun removing
// the session (its mark is there, its record still is), a call starts
// nothing and ends with ErrGone.
func TestCallOfASessionBeingRemoved(t *testing.T) {
	s := newTestSession(t, Options{})
	sh(t, s, "true")
	markRemoving(s.dirs.Root)
	ctx := context.Background()
	_, err := s.Shell(ctx, session.Command{Script: "touch ran"}, session.ShellOptions{})
	if !errors.Is(err, session.ErrGone) {
		t.Fatalf("a call of a session being removed: %v, want ErrGone", err)
	}
	if _, err := os.Lstat(filepath.Join(s.dirs.Workspace, "ran")); err == nil {
		t.Error("the call ran")
	}
}

// awaitFile waits for path to exist: the file a call under test makes
// once it runs.
func awaitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Lstat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the call did not start")
		}
	}
}
