//go:build linux

package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// fakeVersion is the msb version fakemsb reports unless FAKEMSB_VERSION
// names another.
const fakeVersion = "0.6.18"

func version() string {
	if v := os.Getenv("FAKEMSB_VERSION"); v != "" {
		return v
	}
	return fakeVersion
}

// imageCached reports whether ref is in the image cache fakemsb plays:
// every reference, unless FAKEMSB_IMAGES lists the cached ones.
func imageCached(ref string) bool {
	list, ok := os.LookupEnv("FAKEMSB_IMAGES")
	return !ok || slices.Contains(strings.Split(list, ","), ref)
}

// qualifiedRef is ref as msb names it in "image not cached": with its
// registry (docker.io, and library/ for a one-word name) and tag (latest).
func qualifiedRef(ref string) string {
	first, _, hasSlash := strings.Cut(ref, "/")
	if !hasSlash {
		ref = "docker.io/library/" + ref
	} else if !strings.ContainsAny(first, ".:") && first != "localhost" {
		ref = "docker.io/" + ref
	}
	last := ref[strings.LastIndexByte(ref, '/')+1:]
	if !strings.ContainsAny(last, ":@") {
		ref += ":latest"
	}
	return ref
}

// doctor answers like msb 0.6.18's `msb doctor`: the report on stderr,
// exit 0 when the host can boot sandboxes. FAKEMSB_DOCTOR, when set, is
// the reason it cannot: then msb's "error:" line, a hint, and exit 1.
func (a *app) doctor() error {
	home := os.Getenv("MSB_HOME")
	if home == "" {
		home = a.home
	}
	exe, _ := os.Executable()
	var b strings.Builder
	fmt.Fprintf(&b, "info Platform: %s %s\ninfo Version: v%s\ninfo MSB_HOME: %s\n", runtime.GOOS, runtime.GOARCH, version(), home)
	fmt.Fprintf(&b, "   ✓ %-12s %s\n", "msb", exe)
	reason := os.Getenv("FAKEMSB_DOCTOR")
	if reason == "" {
		fmt.Fprintf(&b, "   ✓ %-12s %s\n", "KVM device", "simulated by fakemsb")
		fmt.Fprint(a.stderr, b.String())
		return nil
	}
	fmt.Fprintf(&b, "   ✗ %-12s %s\n", "CPU virt", "not found")
	fmt.Fprintf(&b, "error: %s\n  → FAKEMSB_DOCTOR is set\n", reason)
	return &exitError{code: 1, msg: b.String()}
}

// imageInspect answers `msb image inspect REF --format json` with the
// fields of msb 0.6.18's record that describe a cached image. fakemsb keeps
// no image cache: every reference is cached unless FAKEMSB_IMAGES, a
// comma-separated list of references, is set and does not name it.
func (a *app) imageInspect(p *parsed) error {
	if err := p.oneOf("format", "table", "json"); err != nil {
		return err
	}
	ref := p.arg("REFERENCE")
	if !imageCached(ref) {
		return failf("image not found: %s", ref)
	}
	if p.str("format") != "json" {
		fmt.Fprintf(a.stdout, "Reference:      %s\nArchitecture:   %s\nOS:             linux\n", ref, runtime.GOARCH)
		return nil
	}
	return a.printJSON(map[string]any{
		"reference": ref, "architecture": runtime.GOARCH, "os": "linux",
		"created_at": a.now.UTC().Format(time.RFC3339Nano), "layer_count": 0, "layers": []any{}, "size_bytes": 0,
	})
}
