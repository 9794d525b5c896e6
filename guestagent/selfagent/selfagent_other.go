//go:build !linux

package selfagent

import "runtime"

// Guest reports that this program cannot serve as the agent in a guest:
// guests run Linux.
func Guest(string) (ok bool, why string) {
	return false, "this program is built for " + runtime.GOOS + ", guests run Linux"
}
