//go:build !linux

package local

import (
	"context"
	"runtime"
)

// unsupported is why no other host OS has a local backend: every tool call
// is a builtin of the guest agent, which serves on Linux only (it stands
// on /proc, pidfds and setfsuid). macOS has msb's microVMs instead; on
// Windows, the Linux backend runs in WSL2.
const unsupported = "the local backend runs on Linux only: its tool calls are the guest agent's builtins, which need Linux " +
	"(on macOS use msb, which boots microVMs on Apple Silicon; on Windows, run oma-sandbox in WSL2)"

func probeHost(context.Context, probeRequest) (Capabilities, platform) {
	why := none("unsupported on " + runtime.GOOS + ": " + unsupported)
	c := Capabilities{Platform: runtime.GOOS, Filesystem: why, Network: why, Process: why, Resources: why, Limits: map[string]Control{}}
	for _, k := range limitKeys {
		c.Limits[k] = why
	}
	return c, nil
}
