//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A token file someone else could have planted is refused, at once: a
// FIFO (reading it waited for a writer, holding the command), or another
// user's file, however private its mode (its owner chose the token).
func TestResolveTokenRefusesPlantedFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{fifo: "is not a regular file"}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(dir, "theirs")
		if err := os.WriteFile(theirs, []byte(strings.Repeat("k", 40)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases[theirs] = "is owned by uid 65534, not this user (uid 0)"
	} else {
		t.Log("not root: no file of another user's to make; the FIFO only")
	}
	for file, want := range cases {
		done := make(chan error, 1)
		go func() {
			_, err := resolveToken(file)
			done <- err
		}()
		select {
		case err := <-done:
			if _, usage := err.(*usageError); !usage || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: got %v, want a usage error containing %q", file, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: still reading after 5s", file)
		}
	}
}
