// Package realmsb finds the pinned real msb binary that scripts/deps.sh
// installs into the module's ignored .tools/msb/, for tests that check the
// project's assumptions against it. Every test gets its own MSB_HOME, so
// the real msb never touches the user's ~/.microsandbox.
package realmsb

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Version is the msb release the project is tested against.
const Version = "0.6.18"

// SkipReason is why a test skips when the binary is absent.
const SkipReason = "real msb not installed: run scripts/deps.sh"

// Bin returns the path of .tools/msb/bin/msb under the module root that
// contains dir, or an error when it is not there.
func Bin(dir string) (string, error) {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			bin := filepath.Join(dir, ".tools", "msb", "bin", "msb")
			if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return "", errors.New(SkipReason)
			}
			return bin, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// Env is one test's real msb: its binary and a private, empty MSB_HOME.
type Env struct {
	Bin  string
	Home string
}

// New returns the real msb with a fresh MSB_HOME under t.TempDir, or skips
// t with SkipReason when the binary is not installed.
func New(t testing.TB) *Env {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := Bin(wd)
	if err != nil {
		t.Skip(err.Error())
	}
	return &Env{Bin: bin, Home: filepath.Join(t.TempDir(), "msb-home")}
}

// Environ is what msb needs to use this Env's home; pass it as msb.CLI.Env.
func (e *Env) Environ() []string { return []string{"MSB_HOME=" + e.Home} }
