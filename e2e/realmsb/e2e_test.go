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
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/realmsb"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// imageArchive is where `make image` (scripts/build-image.sh) writes the
// guest image, relative to the module root.
const imageArchive = "bin/sandbox-image.tar"

// TestRealMSBSession is the session lifecycle on the real msb, in a fresh
// MSB_HOME into which it loads the image archive `make image` wrote.
func TestRealMSBSession(t *testing.T) {
	env := realmsb.New(t)
	switch verdict, err := doctor(env.Bin, env.Environ()); {
	case err != nil:
		t.Fatal(err)
	case verdict != "":
		t.Skip(verdict)
	}
	cli := &msb.CLI{Path: env.Bin, Env: env.Environ()}
	archive, err := moduleFile(imageArchive)
	if err != nil {
		t.Fatal(err)
	}
	switch err := ensureImage(context.Background(), cli, microvm.DefaultImage, archive); {
	case errors.Is(err, errNoArchive):
		t.Skip(err.Error())
	case err != nil:
		t.Fatal(err)
	}
	lifecycle(t, msb.NewClient(cli))
}

// TestFakeMSBSession runs the same lifecycle on fakemsb, whose doctor
// passes and which has every image, so the scenario itself is proven here.
func TestFakeMSBSession(t *testing.T) {
	env := fakemsbtest.New(t)
	if verdict, err := doctor(env.Bin, nil); verdict != "" || err != nil {
		t.Fatalf("fakemsb's doctor: %q, %v; want it to pass", verdict, err)
	}
	cli := &msb.CLI{Path: env.Bin}
	if err := ensureImage(context.Background(), cli, microvm.DefaultImage, filepath.Join(t.TempDir(), "none.tar")); err != nil {
		t.Fatal(err)
	}
	lifecycle(t, msb.NewClient(cli))
}

// doctor runs `msb doctor` and returns "" when it passes, else its
// verdict: the "error:" line and its "→" hints as msb printed them. An
// error means msb doctor could not run at all.
func doctor(bin string, environ []string) (string, error) {
	res, err := (&msb.CLI{Path: bin, Env: environ}).Run(context.Background(), msb.Call{Args: []string{"doctor"}})
	var exitErr *msb.ExitError
	switch {
	case err == nil:
		return "", nil
	case res == nil || !errors.As(err, &exitErr):
		return "", fmt.Errorf("msb doctor: %w", err)
	}
	var verdict []string
	for _, line := range strings.Split(msb.StripANSI(string(res.Stderr)), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "error:") || len(verdict) > 0 && strings.HasPrefix(line, "→") {
			verdict = append(verdict, line)
		}
	}
	if len(verdict) == 0 {
		verdict = []string{err.Error()}
	}
	return "msb doctor says this host cannot boot a microVM: " + strings.Join(verdict, " "), nil
}

// errNoArchive: the image is neither cached nor built.
var errNoArchive = errors.New("no image archive")

// ensureImage makes sure ref is in msb's cache, loading it from archive
// when it is not. The error says what to do when neither works.
func ensureImage(ctx context.Context, cli *msb.CLI, ref, archive string) error {
	inspect := msb.Call{Args: []string{"image", "inspect", ref, "--format", "json"}}
	if _, err := cli.Run(ctx, inspect); err == nil {
		return nil
	} else if !errors.Is(err, msb.ErrImageNotCached) {
		return fmt.Errorf("msb image inspect %s: %w", ref, err)
	}
	if _, err := os.Stat(archive); err != nil {
		return fmt.Errorf("%w: image %s is not in this MSB_HOME and %s is missing: run `make image` (or `make e2e-real`, which builds it)", errNoArchive, ref, archive)
	}
	if _, err := cli.Run(ctx, msb.Call{Args: []string{"load", "--quiet", "--tag", ref, "--input", archive}}); err != nil {
		return fmt.Errorf("msb load %s: %w", archive, err)
	}
	if _, err := cli.Run(ctx, inspect); err != nil {
		return fmt.Errorf("msb load %s did not cache %s: %w", archive, ref, err)
	}
	return nil
}

// moduleFile is rel below the module root (the directory with go.mod
// above the test's working directory).
func moduleFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, rel), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// TestRealMSBLoadsMissingImage: where the image is not cached, ensureImage
// loads the archive into the test's MSB_HOME with the real msb (no VM
// boots), and says to run `make image` when there is no archive.
func TestRealMSBLoadsMissingImage(t *testing.T) {
	env := realmsb.New(t)
	cli := &msb.CLI{Path: env.Bin, Env: env.Environ()}
	ctx := context.Background()
	const ref = "e2e/tiny:1"
	err := ensureImage(ctx, cli, ref, filepath.Join(t.TempDir(), "missing.tar"))
	if !errors.Is(err, errNoArchive) || !strings.Contains(err.Error(), "run `make image`") {
		t.Fatalf("without an archive: %v, want errNoArchive saying to run make image", err)
	}
	// Tagged with another reference: msb load --tag names it.
	archive := realmsb.TinyArchive(t, "e2e/other:1")
	if err := ensureImage(ctx, cli, ref, archive); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Run(ctx, msb.Call{Args: []string{"image", "inspect", ref, "--format", "json"}}); err != nil {
		t.Fatalf("after ensureImage: %v", err)
	}
	if err := ensureImage(ctx, cli, ref, filepath.Join(t.TempDir(), "missing.tar")); err != nil {
		t.Fatalf("a cached image needs no archive: %v", err)
	}
}
