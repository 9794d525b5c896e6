//go:build !linux

package local

// removeCgroups has nothing to remove where sessions use no cgroups.
func removeCgroups(string) error { return nil }

// stopSessionProcesses has nothing to find where no call outlives its
// host process: sandbox-exec and the broker die with their caller.
func stopSessionProcesses(hostDirs) error { return nil }
