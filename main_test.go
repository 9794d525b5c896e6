package omasandbox_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"go.uber.org/goleak"

	"github.com/oma-sandbox/oma-sandbox/session/local"
)

// TestMain leaves the examples out, saying why, where the local backend
// they run on cannot work: their output is the documentation and cannot
// say "skipped".
func TestMain(m *testing.M) {
	flag.Parse()
	if reason := localMissing(); reason != "" {
		fmt.Fprintln(os.Stderr, "omasandbox: examples not run:", reason)
		_ = flag.Set("test.run", "^Test")
	}
	goleak.VerifyTestMain(m)
}

// localMissing says what the local backend lacks on this host, "" if nothing.
func localMissing() string {
	if _, err := exec.LookPath("rg"); err != nil {
		return "ripgrep (rg) is not installed"
	}
	if caps := local.Probe(context.Background()); caps.Backend == "" {
		return "no working local sandbox: " + caps.Filesystem.Detail
	}
	return ""
}
