//go:build linux

package bundle

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// selfHelperEnv makes the test binary a helper that waits for a line on
// stdin, then prints the path SelfCached gives for the directory the
// variable names.
const selfHelperEnv = "OMA_BUNDLE_SELF_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(selfHelperEnv); dir != "" {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		path, err := SelfCached(dir, 0o500)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(path)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A program replaced on disk after it started copies itself, the program
// running, not what now lies at its path; the copy is private to its owner.
func TestSelfCachedCopiesTheRunningProgram(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	running, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	prog := filepath.Join(tmp, "prog")
	if err := os.WriteFile(prog, running, 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(tmp, "cache")
	cmd := exec.Command(prog)
	cmd.Env = append(os.Environ(), selfHelperEnv+"="+cache)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The upgrade: another program renamed over the path.
	next := filepath.Join(tmp, "next")
	if err := os.WriteFile(next, []byte("#!/bin/sh\necho the next version\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, prog); err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(stdin, "go\n")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v: %s", err, stderr.String())
	}
	copyPath := strings.TrimSpace(stdout.String())
	got, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, running) {
		t.Errorf("the copy (%d bytes) is not the program that ran (%d bytes)", len(got), len(running))
	}
	fi, err := os.Stat(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o500 {
		t.Errorf("mode %o, want 0500", fi.Mode().Perm())
	}
}

// Placing a copy removes the copies of other programs no one asked for in
// a week; a copy asked for again is kept (its time is renewed), and
// nothing but copies of ours is touched.
func TestSelfCachedPrunesCopiesUnaskedFor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-selfUnused - time.Hour)
	plant := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o500); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := plant(selfPrefix + "stale")
	other := plant("oma-guest-agent-0123") // a bundled agent's copy
	link := filepath.Join(dir, selfPrefix+"link")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, link, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	recent := plant(selfPrefix + "recent")
	if err := os.Chtimes(recent, time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}

	path, err := SelfCached(dir, 0o500)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{stale: false, other: true, link: true, recent: true, path: true} {
		if _, err := os.Lstat(p); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(p), err == nil, want)
		}
	}

	// Asked for again, the copy's time is renewed.
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if again, err := SelfCached(dir, 0o500); err != nil || again != path {
		t.Fatalf("asked again: %q, %v", again, err)
	}
	if fi, err := os.Stat(path); err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Errorf("the copy asked for again was not renewed: %v %v", fi.ModTime(), err)
	}
}
