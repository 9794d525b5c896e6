//go:build linux

package confine

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// checkX32 refuses x32 calls, numbered with bit 30 on the same arch.
	checkX32 = true
)
