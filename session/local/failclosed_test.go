//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// stub writes an executable script and returns its path.
func stub(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// refused checks that Create fails with ErrUnavailable and leaves no
// session behind.
func refused(t *testing.T, o Options, want string) {
	t.Helper()
	o.StateDir = t.TempDir()
	s, err := Create(context.Background(), o)
	if err == nil {
		s.Close(context.Background())
		t.Fatalf("Create succeeded; want refusal mentioning %q", want)
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Create: %v; want ErrUnavailable mentioning %q", err, want)
	}
	if ents, _ := os.ReadDir(o.StateDir); len(ents) != 0 {
		t.Fatalf("refused Create left %d entries", len(ents))
	}
}

func TestMissingBwrapIsRefused(t *testing.T) {
	refused(t, Options{Bwrap: "/nonexistent/bwrap"}, "bubblewrap not found")
}

func TestNoopBwrapIsRefused(t *testing.T) {
	log := filepath.Join(t.TempDir(), "argv")
	noop := stub(t, "bwrap", `echo "$@" >> `+log+`; exit 0`)
	refused(t, Options{Bwrap: noop}, "did not run a sandboxed /bin/sh")
	data, _ := os.ReadFile(log)
	if strings.Contains(string(data), "/bin/bash") {
		t.Fatal("a session command reached the no-op bwrap")
	}
}

// A bwrap that runs the command without isolating it is caught by what
// the command sees.
func TestPassThroughBwrapIsRefused(t *testing.T) {
	pass := stub(t, "bwrap", `while [ "$1" != -- ]; do shift; done; shift; exec "$@" 3>&-`)
	refused(t, Options{Bwrap: pass}, "did not run a sandboxed /bin/sh")
	fake := stub(t, "bwrap", `while [ "$1" != -- ]; do shift; done; shift; exec "$@"`)
	refused(t, Options{Bwrap: fake}, "host's mount namespace")
}

func TestAllowlistWithoutTargetsIsRefused(t *testing.T) {
	path, count := countingBwrap(t)
	_, err := Create(context.Background(), Options{Bwrap: path, StateDir: t.TempDir(), Policy: Policy{Network: NetworkAllowlist}})
	if !errors.Is(err, session.ErrInvalid) || !strings.Contains(err.Error(), "an allowlist needs at least one target") {
		t.Fatalf("Create: %v; want ErrInvalid naming the empty allowlist", err)
	}
	if count() != 0 {
		t.Fatal("a refused policy spawned bwrap")
	}
}

func TestUnenforceableLimitIsRefused(t *testing.T) {
	// A PATH with bwrap and setpriv but no prlimit: file-size cannot be enforced.
	dir := t.TempDir()
	for _, tool := range []string{"bwrap", "setpriv"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skip(err)
		}
		if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	refused(t, Options{Limits: Limits{FileSize: 1 << 20}}, "limit file-size")
	if c := Probe(context.Background()); c.Limits[LimitFileSize].Evidence != EvidenceNone || c.Filesystem.Evidence != EvidenceFull {
		t.Fatalf("probe without prlimit: %v", c)
	}
}

func TestDangerNeedsAllowDangerous(t *testing.T) {
	_, err := Create(context.Background(), Options{StateDir: t.TempDir(), Policy: Policy{Mode: ModeDangerFullAccess}})
	if !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("danger without AllowDangerous: %v", err)
	}
}

func TestProbeReportsEveryControl(t *testing.T) {
	c := Probe(context.Background())
	t.Logf("\n%s", c)
	if c.Backend != "bubblewrap" || c.Filesystem.Evidence != EvidenceFull || c.Network.Evidence != EvidenceFull || c.Process.Evidence == EvidenceNone {
		t.Fatalf("isolation not proven on this host: %v", c)
	}
	if os.Geteuid() != 0 {
		return // cgroups are root's on this kind of host
	}
	for _, k := range limitKeys {
		if c.Limits[k].Evidence != EvidenceFull {
			t.Errorf("limit %s: %+v", k, c.Limits[k])
		}
	}
}

func TestCreateHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	if _, err := Create(ctx, Options{StateDir: dir}); !errors.Is(err, session.ErrAborted) {
		t.Fatalf("canceled Create: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatal("canceled Create left state")
	}
}

// A bwrap that ignores --seccomp (an old or altered one) is caught by
// what the probe command reads in its own status.
func TestBwrapWithoutSeccompIsRefused(t *testing.T) {
	real, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("bwrap not installed")
	}
	dropSeccomp := stub(t, "bwrap", `for a do shift
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  if [ "$a" = --seccomp ]; then skip=1; continue; fi
  set -- "$@" "$a"
done
exec `+real+` "$@"`)
	refused(t, Options{Bwrap: dropSeccomp}, "without the seccomp filter")
}
