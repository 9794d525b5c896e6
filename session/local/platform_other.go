//go:build !linux

package local

import (
	"context"
	"runtime"
)

// removeCgroups has nothing to remove where sessions use no cgroups.
func removeCgroups(string) error { return nil }

type probeRequest struct {
	bwrap  string
	limits Limits
	all    bool
}

// Probe reports what this host can enforce.
func Probe(ctx context.Context) Capabilities {
	c, _ := probeHost(ctx, probeRequest{all: true})
	return c
}

func probeHost(context.Context, probeRequest) (Capabilities, platform) {
	why := none("no local sandbox backend on " + runtime.GOOS + " yet")
	c := Capabilities{Platform: runtime.GOOS, Filesystem: why, Network: why, Process: why, Resources: why, Limits: map[string]Control{}}
	return c, nil
}
