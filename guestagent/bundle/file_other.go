//go:build !unix

package bundle

import "os"

// openNoFollow: Windows opens no symlink as a file by name here.
const openNoFollow = 0

// ownedByUs: Windows has no uid to compare; the directory's ACL guards it.
func ownedByUs(os.FileInfo) bool { return true }

// fileIdentity: no inode to name the file by; its size and time do.
func fileIdentity(os.FileInfo) string { return "" }
