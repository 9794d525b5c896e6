//go:build unix && !linux

package msb

import "syscall"

// dieWithParent has no equivalent outside Linux: there an msb whose host
// was killed ends when its exec call's connection does.
func dieWithParent(*syscall.SysProcAttr) {}
