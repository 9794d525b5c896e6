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
