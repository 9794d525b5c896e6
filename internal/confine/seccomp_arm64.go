//go:build linux

package confine

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	checkX32  = false
)
