//go:build unix

package main

import (
	"os"
	"syscall"
)

// tokenOpenFlags open a token file without following a link (ELOOP) or
// waiting for a writer (a FIFO).
const tokenOpenFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// ownerOf is the uid that owns fi's file.
func ownerOf(fi os.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
