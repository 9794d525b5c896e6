package local

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Attach runs no probe sandbox while what Create proved still holds, and
// probes again when a fact it held for changed: here the bubblewrap it
// ran was replaced by one that does not isolate, which Attach must then
// refuse rather than trust the proof.
func TestAttachTrustsAProofOnlyWhileItsFactsHold(t *testing.T) {
	bw, count := countingBwrap(t)
	state := t.TempDir()
	s := newTestSession(t, Options{StateDir: state, Bwrap: bw})
	root := s.dirs.Root
	kept, err := os.ReadFile(filepath.Join(root, proofFile))
	if err != nil {
		t.Fatalf("Create kept no proof: %v", err)
	}

	before := count()
	a, err := Attach(context.Background(), state, s.Name())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if n := count() - before; n != 0 {
		t.Fatalf("Attach ran bwrap %d times; the proof Create kept should have spared it", n)
	}
	if got := sh(t, a, "echo $((6*7))"); strings.TrimSpace(string(got.Stdout)) != "42" {
		t.Fatalf("a call on the attached session: %q", got.Stdout)
	}
	if again, _ := os.ReadFile(filepath.Join(root, proofFile)); string(again) != string(kept) {
		t.Fatal("recalling the proof rewrote it: a proof in use would never age out")
	}

	// The same path, another program: a bwrap that runs the command
	// unisolated.
	script := "#!/bin/sh\nwhile [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"\n"
	if err := os.WriteFile(bw+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bw+".new", bw); err != nil {
		t.Fatal(err)
	}
	_, err = Attach(context.Background(), state, s.Name())
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "host's mount namespace") {
		t.Fatalf("Attach after bwrap was replaced: %v; want it refused by a new probe", err)
	}
}

// A proof is recalled only when it is this user's own file, unchanged in
// its facts, and younger than proofMaxAge.
func TestRecallProofRefusesWhatItCannotTrust(t *testing.T) {
	facts := []byte(`{"boot_id":"b"}`)
	caps := Capabilities{Platform: "linux", Backend: "bubblewrap", Filesystem: full("proved")}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	write := func(t *testing.T, pr proof, mode os.FileMode) string {
		t.Helper()
		root := t.TempDir()
		data, err := json.Marshal(pr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, proofFile), data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(root, proofFile), mode); err != nil {
			t.Fatal(err)
		}
		return root
	}
	good := proof{Facts: facts, At: now.Add(-time.Minute), Caps: caps}
	if got, ok := recallProof(write(t, good, 0o600), facts, now); !ok || got.Filesystem.Detail != "proved" {
		t.Fatalf("a good proof was not recalled: %v %+v", ok, got)
	}
	cases := map[string]func(t *testing.T) (root string, facts []byte){
		"other facts": func(t *testing.T) (string, []byte) {
			return write(t, good, 0o600), []byte(`{"boot_id":"c"}`)
		},
		"too old": func(t *testing.T) (string, []byte) {
			old := good
			old.At = now.Add(-proofMaxAge - time.Second)
			return write(t, old, 0o600), facts
		},
		"from the future": func(t *testing.T) (string, []byte) {
			future := good
			future.At = now.Add(time.Hour)
			return write(t, future, 0o600), facts
		},
		"no working sandbox": func(t *testing.T) (string, []byte) {
			none := good
			none.Caps.Backend = ""
			return write(t, none, 0o600), facts
		},
		"writable by others": func(t *testing.T) (string, []byte) {
			return write(t, good, 0o622), facts
		},
		"a symlink": func(t *testing.T) (string, []byte) {
			src := write(t, good, 0o600)
			root := t.TempDir()
			if err := os.Symlink(filepath.Join(src, proofFile), filepath.Join(root, proofFile)); err != nil {
				t.Fatal(err)
			}
			return root, facts
		},
		"malformed": func(t *testing.T) (string, []byte) {
			root := t.TempDir()
			if err := os.WriteFile(filepath.Join(root, proofFile), []byte(`{"facts":`), 0o600); err != nil {
				t.Fatal(err)
			}
			return root, facts
		},
		"unknown fields": func(t *testing.T) (string, []byte) {
			root := t.TempDir()
			data, _ := json.Marshal(good)
			data = append([]byte(`{"trusted":true,`), data[1:]...)
			if err := os.WriteFile(filepath.Join(root, proofFile), data, 0o600); err != nil {
				t.Fatal(err)
			}
			return root, facts
		},
		"oversized": func(t *testing.T) (string, []byte) {
			big := good
			big.Caps.Filesystem.Detail = strings.Repeat("x", proofMaxBytes)
			return write(t, big, 0o600), facts
		},
		"missing": func(t *testing.T) (string, []byte) { return t.TempDir(), facts },
		// Opening a FIFO for reading would wait for a writer: the proof is
		// opened without waiting, then refused as no regular file.
		"a fifo": func(t *testing.T) (string, []byte) {
			root := t.TempDir()
			if err := syscall.Mkfifo(filepath.Join(root, proofFile), 0o600); err != nil {
				t.Fatal(err)
			}
			return root, facts
		},
		"another user's": func(t *testing.T) (string, []byte) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the proof to another user")
			}
			root := write(t, good, 0o600)
			if err := os.Chown(filepath.Join(root, proofFile), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return root, facts
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			root, f := setup(t)
			type recalled struct {
				caps Capabilities
				ok   bool
			}
			done := make(chan recalled, 1)
			go func() {
				caps, ok := recallProof(root, f, now)
				done <- recalled{caps, ok}
			}()
			select {
			case got := <-done:
				if got.ok {
					t.Fatalf("recalled %+v", got.caps)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("recallProof still waits after 10 s")
			}
		})
	}
}
