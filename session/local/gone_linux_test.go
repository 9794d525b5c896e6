//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// TestEndedUnderACall: another process resizes or poisons the session
// while a bash call runs in its resident sandbox, which that ends. The
// call says what ended it (a broken channel still, to errors.Is), the
// session stays usable, and the next call runs in a new sandbox; a
// sandbox that dies on its own says nothing of the host ending it.
func TestEndedUnderACall(t *testing.T) {
	ctx := context.Background()
	s := newTestSession(t, Options{})
	other, err := Attach(ctx, filepath.Dir(s.dirs.Root), s.Name())
	if err != nil {
		t.Fatal(err)
	}
	tb := tools.New(s, tools.Options{})
	interrupted := func(interrupt func()) error {
		t.Helper()
		started := filepath.Join(s.dirs.Workspace, "started")
		_ = os.Remove(started)
		done := make(chan error, 1)
		go func() {
			_, err := tb.Call(ctx, "bash", json.RawMessage(`{"command":"touch started; sleep 30"}`), nil)
			done <- err
		}()
		awaitFile(t, started)
		interrupt()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("the call outlived its sandbox")
			return nil
		}
	}
	for _, c := range []struct {
		name, said string
		end        func() error
	}{
		{"resize", "a resize of the session ended its sandbox under the call", func() error {
			if !hostEnforces(t, s, Limits{MemoryBytes: 96 << 20}) {
				return errors.ErrUnsupported
			}
			return other.Resize(ctx, session.Resize{Memory: "96M"})
		}},
		{"poison", "the poisoning of the session (a call left the guest's state unknown) ended its sandbox under the call", func() error {
			return other.Poison(ctx, errors.New("a test's"))
		}},
	} {
		var endErr error
		err := interrupted(func() { endErr = c.end() })
		if errors.Is(endErr, errors.ErrUnsupported) {
			t.Logf("%s: skipped, this host cannot enforce a cgroup memory limit", c.name)
			continue
		}
		if endErr != nil {
			t.Fatalf("%s from another process: %v", c.name, endErr)
		}
		if !errors.Is(err, session.ErrChannelBroken) || !strings.Contains(err.Error(), c.said) {
			t.Errorf("the call under the %s: %v, want a broken channel that says %q", c.name, err, c.said)
		}
		if s.Poisoned() || other.Poisoned() {
			t.Errorf("the %s left the session unusable", c.name)
		}
		if out, err := tb.Call(ctx, "bash", json.RawMessage(`{"command":"echo after"}`), nil); err != nil || out != "after\n" {
			t.Fatalf("the call after the %s: %q, %v", c.name, out, err)
		}
	}
	err = interrupted(func() {
		if err := unix.Kill(readResident(s.dirs.Root).Init.PID, unix.SIGKILL); err != nil {
			t.Fatalf("killing the sandbox: %v", err)
		}
	})
	if !errors.Is(err, session.ErrChannelBroken) || strings.Contains(err.Error(), "ended its sandbox") {
		t.Errorf("the call in a sandbox that died: %v, want a broken channel that says nothing of the host ending it", err)
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

// TestNoResidentSandboxStartsUnderARemoval: a call of another process
// that passed its look at the removal mark just before the removal began
// reaches its resident sandbox's start while the box is being removed,
// after the removal's scan for the session's sandboxes. It must start
// nothing there: a sandbox started then outlives the session, its bwrap
// and agent running on with no record left to end them.
func TestNoResidentSandboxStartsUnderARemoval(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Create(ctx, Options{StateDir: dir})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	defer s.Close(ctx)
	other, err := Attach(ctx, dir, s.Name())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	// A box that takes a while to remove.
	many := filepath.Join(s.dirs.Workspace, "many")
	if err := os.Mkdir(many, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 60000
	for i := range n {
		if err := os.WriteFile(filepath.Join(many, strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	workdir, err := other.workdir("")
	if err != nil {
		t.Fatal(err)
	}
	c := call{name: other.rec.Name, dirs: other.dirs, policy: other.rec.Policy, limits: other.limits(),
		env: other.env, workdir: workdir, argv: []string{"/bin/bash", "-c", "true", "bash"}}
	// The session's groups, wherever this process's are.
	l := latestCgroups()
	var groups []string
	for _, base := range append(slices.Collect(maps.Values(l.v1)), l.v2) {
		if base != "" {
			groups = append(groups, filepath.Join(base, "oma-"+s.Name()))
		}
	}
	// Whatever was left running is ended at the end, found by its bind,
	// and its groups removed.
	defer func() {
		_ = stopWorkspaceBinders(s.dirs.Workspace)
		for _, g := range groups {
			_ = emptyAndRemove(g)
		}
	}()
	removed := make(chan error, 1)
	go func() { removed <- removeSession(s.dirs.Root) }()
	// The removal is in the box once some of its files are gone.
	for inBox := false; !inBox; {
		for i := 0; i < n && !inBox; i += n / 100 {
			_, err := os.Lstat(filepath.Join(many, strconv.Itoa(i)))
			inBox = err != nil
		}
	}
	cur, err := other.residentSandbox(ctx, c)
	if cur != nil {
		other.res.leave()
	}
	if err := <-removed; err != nil {
		t.Fatalf("removal: %v", err)
	}
	if _, err := os.Lstat(s.dirs.Root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the session's directory is left: %v", err)
	}
	noProcs(t, s.Name())
	for _, g := range groups {
		if exists(g) {
			t.Errorf("the session's group %s is left", g)
		}
	}
}
