//go:build !linux

package local

// removeCgroups has nothing to remove where sessions use no cgroups.
func removeCgroups(string) error { return nil }

// stopSessionProcesses has nothing to find where no session runs (see
// platform_other.go).
func stopSessionProcesses(hostDirs) error { return nil }

// thawCgroups has nothing to thaw where sessions use no cgroups.
func thawCgroups(string) {}
