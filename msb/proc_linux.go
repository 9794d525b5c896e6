package msb

import "syscall"

// dieWithParent makes the kernel SIGKILL msb when the thread that started
// it exits: a host killed with SIGKILL (no chance to cancel its calls)
// leaves no msb process running its last command. Go exits a thread only
// when a goroutine locked to it returns, and no caller of Run locks one.
func dieWithParent(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
