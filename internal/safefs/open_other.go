//go:build unix && !linux

package safefs

import "golang.org/x/sys/unix"

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
