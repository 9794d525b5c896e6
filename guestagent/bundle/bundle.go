// Package bundle embeds the guest agent binaries `make agent` built, so
// that oma-sandbox can place one in each msb sandbox it creates.
package bundle

import (
	"embed"
	"runtime"
)

// bin holds a README and, after `make agent`, the binaries.
//
//go:embed all:bin
var bin embed.FS

// Binary returns the embedded oma-guest-agent for linux/goarch; false
// when this build has none (it was built without `make agent`).
func Binary(goarch string) ([]byte, bool) {
	if goarch != "amd64" && goarch != "arm64" {
		return nil, false
	}
	b, err := bin.ReadFile("bin/oma-guest-agent-linux-" + goarch)
	if err != nil || len(b) == 0 {
		return nil, false
	}
	return b, true
}

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
