//go:build linux

package main

import (
	"bufio"
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBashOutputStreams checks that tool bash on a terminal, and run on a
// pipe, write the command's output while it still runs, not when it ends:
// the first line must arrive well before the command's final sleep is
// over. A script cannot see this, since testscript collects stdout at exit.
func TestBashOutputStreams(t *testing.T) {
	state := t.TempDir()
	var created bytes.Buffer
	if code := Main([]string{"--state-dir", state, "session", "create", "--backend", "local"}, nil, &created, io.Discard); code != 0 {
		t.Fatalf("session create exited %d", code)
	}
	name := strings.TrimSpace(created.String())
	const script = "echo first; sleep 3; echo second"
	for _, tc := range []struct {
		name     string
		args     []string
		terminal bool
	}{
		{"tool", []string{"--state-dir", state, "tool", name, "bash", `{"command":"` + script + `"}`}, true},
		{"run", []string{"--state-dir", state, "run", "--backend", "local", "--outputs", filepath.Join(state, "out"), "--", "sh", "-c", script}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout io.WriteCloser
			var r io.Reader
			if tc.terminal {
				stdout, r = openTerminal(t)
			} else {
				r, stdout = io.Pipe()
			}
			done := make(chan int, 1)
			go func() {
				code := Main(tc.args, nil, stdout, io.Discard)
				stdout.Close()
				done <- code
			}()
			out := bufio.NewReader(r)
			first, err := out.ReadString('\n')
			if err != nil || first != "first\n" {
				t.Fatalf("first line %q, %v", first, err)
			}
			arrived := time.Now()
			rest, _ := io.ReadAll(out)
			if code := <-done; code != 0 {
				t.Fatalf("exited %d", code)
			}
			if !strings.HasPrefix(string(rest), "second\n") {
				t.Errorf("after the first line: %q", rest)
			}
			if gap := time.Since(arrived); gap < time.Second {
				t.Errorf("the first line came only %v before the end: output was not streamed", gap)
			}
		})
	}
	if code := Main([]string{"--state-dir", state, "session", "rm", name}, nil, io.Discard, io.Discard); code != 0 {
		t.Errorf("session rm exited %d", code)
	}
}
