// Package bundle embeds the guest agent binaries `make agent` built, so
// that oma-sandbox can place one in each msb sandbox it creates.
package bundle

import (
	"embed"
	"io/fs"
	"runtime"
)

// bin holds a README and, after `make agent`, the binaries.
//
//go:embed all:bin
var bin embed.FS

// Binary returns the embedded oma-guest-agent for linux/goarch; false
// when this build has none (it was built without `make agent`).
func Binary(goarch string) ([]byte, bool) {
	if !Embedded(goarch) {
		return nil, false
	}
	b, err := bin.ReadFile(binaryName(goarch))
	return b, err == nil
}

// Embedded reports whether this build holds a guest agent for
// linux/goarch, without copying it as Binary does (some MiB, which a
// command that only reports it should not pay for).
func Embedded(goarch string) bool {
	if goarch != "amd64" && goarch != "arm64" {
		return false
	}
	fi, err := fs.Stat(bin, binaryName(goarch))
	return err == nil && fi.Size() > 0
}

func binaryName(goarch string) string { return "bin/oma-guest-agent-linux-" + goarch }

// GuestArch is the GOARCH of msb's guests on this host: msb runs guests of
// the host's own architecture, and on macOS only on Apple silicon.
func GuestArch() string {
	switch runtime.GOOS {
	case "darwin":
		return "arm64"
	case "windows":
		return "amd64"
	}
	return runtime.GOARCH
}
