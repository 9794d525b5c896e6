//go:build linux

package local

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// procsWith lists host processes whose command line contains marker.
func procsWith(marker string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(data, []byte(marker)) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(data), "\x00", " "))
		}
	}
	return out
}

// newTestSession creates a session in a fresh state directory and, at the
// end of the test, closes it and checks that none of its processes remain.
func newTestSession(t *testing.T, o Options) *Session {
	t.Helper()
	if o.StateDir == "" {
		o.StateDir = t.TempDir()
	}
	s, err := Create(context.Background(), o)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		noProcs(t, s.Name())
	})
	return s
}

// noProcs fails if a process carrying marker is still alive shortly after.
func noProcs(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := procsWith(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("processes left behind: %q", left)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sh(t *testing.T, s *Session, script string, args ...string) *session.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := s.Shell(ctx, session.Command{Script: script, Args: args}, session.ShellOptions{})
	if err != nil {
		t.Fatalf("Shell %q: %v", script, err)
	}
	return res
}
