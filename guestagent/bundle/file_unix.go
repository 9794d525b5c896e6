//go:build unix

package bundle

import (
	"fmt"
	"os"
	"syscall"
)

// openNoFollow opens a cached agent without following a symlink planted at
// its name, and without blocking on a FIFO.
const openNoFollow = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// ownedByUs reports whether fi belongs to this process's effective user.
func ownedByUs(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// fileIdentity names the file fi describes: its device and inode.
func fileIdentity(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}
