//go:build linux

package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// copyRef is one side of `copy`: a host path, or NAME:/abs/path.
type copyRef struct {
	sandbox string
	path    string
}

// parseCopyRef treats anything starting with "/" or "." as a host path,
// so a host path containing ':' needs a "./" prefix, as in msb.
func parseCopyRef(s string) copyRef {
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return copyRef{path: s}
	}
	if name, p, ok := strings.Cut(s, ":"); ok {
		return copyRef{sandbox: name, path: p}
	}
	return copyRef{path: s}
}

func (a *app) copy(p *parsed) error {
	src, dst := parseCopyRef(p.arg("SRC")), parseCopyRef(p.arg("DST"))
	if (src.sandbox == "") == (dst.sandbox == "") {
		return failf("invalid config: exactly one of SRC and DST must be a sandbox path (NAME:/absolute/path)")
	}
	guest := src
	if dst.sandbox != "" {
		guest = dst
	}
	if !path.IsAbs(guest.path) {
		return failf("invalid config: sandbox path must be absolute: %s", guest.path)
	}
	sb, release, err := a.acquire(guest.sandbox)
	if err != nil {
		return err
	}
	defer release()
	root, err := openGuestRoot(sb.Holder.InitPID)
	if err != nil {
		return failf("sandbox not found: %s", guest.sandbox)
	}
	defer root.close()
	if src.sandbox == "" {
		err = copyIn(root, src.path, path.Clean(dst.path))
	} else {
		err = copyOut(root, path.Clean(src.path), dst.path)
	}
	if err != nil {
		return failf("%v", err)
	}
	return nil
}

func ioErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errors.New("io error: " + sentence(errno.Error()) + " (os error " + strconv.Itoa(int(errno)) + ")")
	}
	return errors.New("io error: " + err.Error())
}

func sentence(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// copyIn copies the host path src to the guest path dst like `cp -r`:
// into dst when it is an existing directory, else as dst.
func copyIn(root *guestRoot, src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return ioErr(err)
	}
	if root.isDir(dst) {
		dst = path.Join(dst, filepath.Base(src))
	}
	return copyInEntry(root, src, dst, fi)
}

func copyInEntry(root *guestRoot, src, dst string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		pfd, err := root.open(path.Dir(dst), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return guestErr(dst, err)
		}
		err = unix.Mkdirat(pfd, path.Base(dst), uint32(fi.Mode().Perm()))
		unix.Close(pfd)
		if err != nil && !(err == unix.EEXIST && root.isDir(dst)) {
			return guestErr(dst, err)
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return ioErr(err)
		}
		for _, e := range ents {
			cfi, err := e.Info()
			if err != nil {
				return ioErr(err)
			}
			if err := copyInEntry(root, filepath.Join(src, e.Name()), path.Join(dst, e.Name()), cfi); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return ioErr(err)
		}
		pfd, err := root.open(path.Dir(dst), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return guestErr(dst, err)
		}
		defer unix.Close(pfd)
		_ = unix.Unlinkat(pfd, path.Base(dst), 0)
		if err := unix.Symlinkat(target, pfd, path.Base(dst)); err != nil {
			return guestErr(dst, err)
		}
		return nil
	case fi.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return ioErr(err)
		}
		defer in.Close()
		fd, err := root.open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, uint32(fi.Mode().Perm()))
		if err != nil {
			return guestErr(dst, err)
		}
		out := os.NewFile(uintptr(fd), dst)
		defer out.Close()
		if _, err := io.Copy(out, in); err != nil {
			return ioErr(err)
		}
		if err := out.Chmod(fi.Mode().Perm()); err != nil {
			return ioErr(err)
		}
		return out.Close()
	}
	return nil
}

func guestErr(p string, err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errors.New("sandbox fs error: " + p + ": " + errno.Error())
	}
	return errors.New("sandbox fs error: " + p + ": " + err.Error())
}

// copyOut copies the guest path src to the host path dst like `cp -r`.
// The top-level src may be a guest symlink (resolved inside the guest);
// below it nothing is followed: guest symlinks are copied as symlinks.
func copyOut(root *guestRoot, src, dst string) error {
	fd, err := root.open(src, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return errors.New("stat " + src) // msb 0.6.18's words (copy-out-missing)
	}
	if err != nil {
		return guestErr(src, err)
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	return copyOutFD(fd, src, dst)
}

// copyOutFD copies the open guest file or directory fd (closed on return).
func copyOutFD(fd int, src, dst string) error {
	f := os.NewFile(uintptr(fd), src)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return guestErr(src, err)
	}
	mode := os.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, mode)
		if err != nil {
			return ioErr(err)
		}
		defer out.Close()
		if _, err := io.Copy(out, f); err != nil {
			return ioErr(err)
		}
		if err := out.Chmod(mode); err != nil {
			return ioErr(err)
		}
		return out.Close()
	case unix.S_IFDIR:
		if err := os.Mkdir(dst, mode|0o700); err != nil {
			if fi, lerr := os.Lstat(dst); lerr != nil || !fi.IsDir() {
				return ioErr(err)
			}
		}
		names, err := f.Readdirnames(-1)
		if err != nil {
			return guestErr(src, err)
		}
		for _, n := range names {
			if err := copyOutChild(fd, path.Join(src, n), n, filepath.Join(dst, n)); err != nil {
				return err
			}
		}
		return os.Chmod(dst, mode)
	}
	return nil
}

// copyOutChild copies the entry name of the guest directory dirfd without
// following any symlink; fifos, sockets and devices are skipped.
func copyOutChild(dirfd int, src, name, dst string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return guestErr(src, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return guestErr(src, err)
		}
		_ = os.Remove(dst)
		if err := os.Symlink(string(buf[:n]), dst); err != nil {
			return ioErr(err)
		}
		return nil
	case unix.S_IFREG, unix.S_IFDIR:
		fd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW,
			0, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
		if err != nil {
			return guestErr(src, err)
		}
		return copyOutFD(fd, src, dst)
	}
	return nil
}
