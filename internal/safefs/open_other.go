//go:build unix && !linux

package safefs

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openNoFollow opens one entry of dirfd as a directory, refusing a symlink.
func openNoFollow(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, dirFlags, 0)
}

// chmodNoFollow gives the entry owner rwx without following a symlink.
func chmodNoFollow(dirfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.ENOTDIR
	}
	return unix.Fchmodat(dirfd, name, uint32(st.Mode&0o7777|0o700), unix.AT_SYMLINK_NOFOLLOW)
}

// readEntries lists up to 1024 entries of the directory fd, from the start
// when rewind is set; none means the end. The listing gives no types.
func readEntries(fd int, _ []byte, rewind bool) ([]entry, error) {
	if rewind {
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return nil, err
		}
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	names, err := f.Readdirnames(1024)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	out := make([]entry, len(names))
	for i, n := range names {
		out[i] = entry{name: n}
	}
	return out, nil
}
