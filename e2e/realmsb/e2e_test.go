//go:build linux

// Package realmsb_test runs a whole session against the real msb
// (internal/realmsb, installed by scripts/deps.sh) and the guest image
// `make image` builds, in a private MSB_HOME: create, every tool, an
// upload, the outputs, close, and a reap, with nothing left behind. It
// runs where `msb doctor` passes and skips elsewhere with msb doctor's
// reason; `make e2e-real` runs it. The same scenario also runs on fakemsb,
// so every step is exercised on hosts that cannot boot a VM.
package realmsb_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/realmsb"
	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// TestRealMSBSession is the session lifecycle on the real msb, in an
// MSB_HOME into which it loads the image archive `make image` wrote.
func TestRealMSBSession(t *testing.T) { lifecycle(t, realTarget(t)) }

// TestFakeMSBSession runs the same lifecycle on fakemsb, whose doctor
// passes and which has every image, so the scenario itself is proven here.
func TestFakeMSBSession(t *testing.T) {
	env := fakemsbtest.New(t)
	if verdict, err := realvm.Doctor(env.Bin, nil); verdict != "" || err != nil {
		t.Fatalf("fakemsb's doctor: %q, %v; want it to pass", verdict, err)
	}
	cli := &msb.CLI{Path: env.Bin}
	if err := realvm.EnsureImage(context.Background(), cli, microvm.DefaultImage, filepath.Join(t.TempDir(), "none.tar")); err != nil {
		t.Fatal(err)
	}
	lifecycle(t, target{client: msb.NewClient(cli), agentFile: agenttest.AgentBinary(t)})
}

// TestRealMSBLoadsMissingImage: where the image is not cached, ensureImage
// loads the archive into the test's MSB_HOME with the real msb (no VM
// boots), and says to run `make image` when there is no archive.
func TestRealMSBLoadsMissingImage(t *testing.T) {
	env := realmsb.New(t)
	cli := &msb.CLI{Path: env.Bin, Env: env.Environ()}
	ctx := context.Background()
	const ref = "e2e/tiny:1"
	err := realvm.EnsureImage(ctx, cli, ref, filepath.Join(t.TempDir(), "missing.tar"))
	if !errors.Is(err, realvm.ErrNoArchive) || !strings.Contains(err.Error(), "run `make image`") {
		t.Fatalf("without an archive: %v, want realvm.ErrNoArchive saying to run make image", err)
	}
	// Tagged with another reference: msb load --tag names it.
	archive := realmsb.TinyArchive(t, "e2e/other:1")
	if err := realvm.EnsureImage(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Run(ctx, msb.Call{Args: []string{"image", "inspect", ref, "--format", "json"}}); err != nil {
		t.Fatalf("after ensureImage: %v", err)
	}
	if err := realvm.EnsureImage(ctx, cli, ref, filepath.Join(t.TempDir(), "missing.tar")); err != nil {
		t.Fatalf("a cached image needs no archive: %v", err)
	}
}
