package safefs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"

	"golang.org/x/sys/unix"
)

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openNoFollow opens one entry of dirfd as a directory with openat2,
// which refuses symlinks anywhere, magic links, "..", and mount crossings;
// kernels before 5.6 get openat with O_NOFOLLOW, which for a single name
// refuses the same symlink.
func openNoFollow(dirfd int, name string) (int, error) {
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   dirFlags,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if errors.Is(err, unix.ENOSYS) {
		return unix.Openat(dirfd, name, dirFlags, 0)
	}
	return fd, err
}

// chmodNoFollow gives the directory name of dirfd owner rwx. It opens the
// entry O_PATH|O_NOFOLLOW (which needs no permission on it), checks that
// it is a directory, and changes the mode of that very inode through
// /proc/self/fd: never a symlink's target.
func chmodNoFollow(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.ENOTDIR
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), st.Mode&0o7777|0o700)
}

// readEntries lists the entries of the directory fd that one getdents
// call returns, from the start when rewind is set (so entries removed
// since the last read are not seen again); none means the end.
func readEntries(fd int, buf []byte, rewind bool) ([]entry, error) {
	if rewind {
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return nil, err
		}
	}
	n, err := unix.Getdents(fd, buf)
	if err != nil {
		return nil, err
	}
	var out []entry
	// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
	for b := buf[:n]; len(b) >= 19; {
		reclen := int(binary.NativeEndian.Uint16(b[16:]))
		if reclen < 19 || reclen > len(b) {
			return nil, errors.New("malformed directory entry")
		}
		name := b[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if s := string(name); s != "." && s != ".." {
			out = append(out, entry{name: s, isDir: b[18] == unix.DT_DIR})
		}
		b = b[reclen:]
	}
	return out, nil
}
