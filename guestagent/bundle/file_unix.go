//go:build unix

package bundle

import (
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
