package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	proofs, _ := filepath.Glob(filepath.Join(root, proofPrefix+"*"+proofSuffix))
	if len(proofs) != 1 {
		t.Fatalf("Create kept %d proofs, want 1: %q", len(proofs), proofs)
	}
	kept, err := os.ReadFile(proofs[0])
	if err != nil {
		t.Fatal(err)
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
	if again, _ := os.ReadFile(proofs[0]); string(again) != string(kept) {
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
	path := func(root string) string { return proofPath(root, facts) }
	write := func(t *testing.T, pr proof, mode os.FileMode) string {
		t.Helper()
		root := t.TempDir()
		data, err := json.Marshal(pr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path(root), data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path(root), mode); err != nil {
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
		"under the name of other facts": func(t *testing.T) (string, []byte) {
			root := write(t, good, 0o600)
			other := []byte(`{"boot_id":"c"}`)
			if err := os.Rename(path(root), proofPath(root, other)); err != nil {
				t.Fatal(err)
			}
			return root, other
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
			if err := os.Symlink(path(src), path(root)); err != nil {
				t.Fatal(err)
			}
			return root, facts
		},
		"malformed": func(t *testing.T) (string, []byte) {
			root := t.TempDir()
			if err := os.WriteFile(path(root), []byte(`{"facts":`), 0o600); err != nil {
				t.Fatal(err)
			}
			return root, facts
		},
		"unknown fields": func(t *testing.T) (string, []byte) {
			root := t.TempDir()
			data, _ := json.Marshal(good)
			data = append([]byte(`{"trusted":true,`), data[1:]...)
			if err := os.WriteFile(path(root), data, 0o600); err != nil {
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
			if err := syscall.Mkfifo(path(root), 0o600); err != nil {
				t.Fatal(err)
			}
			return root, facts
		},
		"another user's": func(t *testing.T) (string, []byte) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the proof to another user")
			}
			root := write(t, good, 0o600)
			if err := os.Chown(path(root), 65534, 65534); err != nil {
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

// Programs attaching in turn each keep a proof of their own and find it
// again; a session keeps the newest proofsKept, none older than
// proofMaxAge.
func TestProofsOfProgramsAttachingInTurnAllHold(t *testing.T) {
	root := t.TempDir()
	caps := Capabilities{Platform: "linux", Backend: "bubblewrap", Filesystem: full("proved")}
	factsOf := func(i int) []byte { return []byte(fmt.Sprintf(`{"program":%d}`, i)) }
	keep := func(i int) {
		t.Helper()
		if err := (probed{caps: caps, plat: &linuxPlatform{}, facts: factsOf(i)}).keep(root); err != nil {
			t.Fatal(err)
		}
	}
	recalled := func(i int) bool {
		_, ok := recallProof(root, factsOf(i), time.Now())
		return ok
	}
	keep(1)
	keep(2)
	if !recalled(1) || !recalled(2) {
		t.Fatalf("after two programs kept proofs: first recalled %v, second %v; want both", recalled(1), recalled(2))
	}

	// Kept a minute apart, the oldest goes beyond proofsKept.
	for i := 1; i <= proofsKept+1; i++ {
		keep(i)
		at := time.Now().Add(-time.Duration(proofsKept+1-i) * time.Minute)
		if err := os.Chtimes(proofPath(root, factsOf(i)), at, at); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= proofsKept+1; i++ {
		if want := i > 1; recalled(i) != want {
			t.Errorf("proof %d of %d recalled: %v, want %v", i, proofsKept+1, recalled(i), want)
		}
	}

	if names, _ := filepath.Glob(filepath.Join(root, "*")); len(names) != proofsKept {
		t.Errorf("the session holds %q, want %d proofs and nothing else", names, proofsKept)
	}

	// One older than proofMaxAge goes at the next keep, however few there are.
	root = t.TempDir()
	keep(1)
	keep(2)
	old := time.Now().Add(-proofMaxAge - time.Minute)
	if err := os.Chtimes(proofPath(root, factsOf(2)), old, old); err != nil {
		t.Fatal(err)
	}
	keep(1)
	if _, err := os.Lstat(proofPath(root, factsOf(2))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a proof older than proofMaxAge is still kept: %v", err)
	}
	if !recalled(1) {
		t.Error("the proof just kept is gone")
	}
}

// TestPruneProofsStaysInItsSessionDir: a state directory's name is the
// host caller's to pick, glob metacharacters included: pruning a
// session's proofs removes its own old ones and never another
// directory's.
func TestPruneProofsStaysInItsSessionDir(t *testing.T) {
	base := t.TempDir()
	now := time.Now()
	old := now.Add(-2 * proofMaxAge)
	proofIn := func(dir string) string {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, proofPrefix+"0011223344556677"+proofSuffix)
		if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, name := range []string{"st?", "st[x]", "st*"} {
		root := filepath.Join(base, name, "s")
		own := proofIn(root)
		other := proofIn(filepath.Join(base, "stx", "s"))
		pruneProofs(root, filepath.Join(root, "kept"), now)
		if _, err := os.Lstat(other); err != nil {
			t.Errorf("pruning the proofs of %s removed another directory's: %v", root, err)
		}
		if _, err := os.Lstat(own); err == nil {
			t.Errorf("pruning the proofs of %s kept its own expired proof", root)
		}
	}
}
