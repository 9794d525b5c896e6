//go:build linux || darwin

package safefs

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// userXattrPrefix names the extended attributes a copy keeps. The real msb
// keeps what its guest sees of a volume's file in one (user.msb.override_stat:
// the guest's owner, mode and file type, a symlink being a regular file on
// the host), so a copy without them would hand the guest a tree of root's
// files with no links. Other namespaces (security.*, trusted.*) are never
// copied: a guest's tree must not grant the host's copy a capability.
const userXattrPrefix = "user."

// copyXattrs copies the user.* extended attributes of the open file or
// directory in to out, and returns the bytes of their values, which the
// caller charges to its budget. A file system without extended attributes
// on the source side has none to copy.
func copyXattrs(in, out int) (int64, error) {
	names, err := listXattrs(in)
	if err != nil {
		return 0, err
	}
	var n int64
	buf := make([]byte, 64<<10) // Linux's largest value
	for _, name := range names {
		if !strings.HasPrefix(name, userXattrPrefix) {
			continue
		}
		sz, err := unix.Fgetxattr(in, name, buf)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since the listing
		}
		if err != nil {
			return n, fmt.Errorf("extended attribute %s: %w", name, err)
		}
		if err := unix.Fsetxattr(out, name, buf[:sz], 0); err != nil {
			return n, fmt.Errorf("extended attribute %s: %w", name, err)
		}
		n += int64(sz)
	}
	return n, nil
}

// listXattrs names the extended attributes of the open file fd. A list
// that grows between its sizing and its reading is sized again, a few
// times: a guest racing it gets an error, not a loop.
func listXattrs(fd int) ([]string, error) {
	for range 3 {
		sz, err := unix.Flistxattr(fd, nil)
		if errors.Is(err, unix.ENOTSUP) || err == nil && sz == 0 {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("extended attributes: %w", err)
		}
		buf := make([]byte, sz)
		sz, err = unix.Flistxattr(fd, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("extended attributes: %w", err)
		}
		var names []string
		for _, name := range bytes.Split(buf[:sz], []byte{0}) {
			if len(name) > 0 {
				names = append(names, string(name))
			}
		}
		return names, nil
	}
	return nil, errors.New("extended attributes: the list kept growing while being read")
}
