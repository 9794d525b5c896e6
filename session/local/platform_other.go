//go:build !linux && !darwin && !windows

package local

import (
	"context"
	"runtime"
)

func probeHost(context.Context, probeRequest) (Capabilities, platform) {
	why := none("no local sandbox backend on " + runtime.GOOS)
	c := Capabilities{Platform: runtime.GOOS, Filesystem: why, Network: why, Process: why, Resources: why, Limits: map[string]Control{}}
	for _, k := range limitKeys {
		c.Limits[k] = why
	}
	return c, nil
}
