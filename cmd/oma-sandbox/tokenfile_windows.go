package main

import "os"

// tokenOpenFlags: Windows opens no FIFO by name, and a link is refused by
// the Lstat before the open.
const tokenOpenFlags = 0

// ownerOf: Windows reports no owner here; its ACLs are the user's to set.
func ownerOf(os.FileInfo) (int, bool) { return 0, false }
