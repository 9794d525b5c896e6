//go:build linux && !amd64 && !arm64

package confine

// No filter is written for other architectures: sandboxes refuse to start
// there rather than run without it.
const (
	auditArch = 0
	checkX32  = false
)
