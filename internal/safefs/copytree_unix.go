//go:build unix

package safefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// maxCopyDepth bounds the nesting CopyTree follows: each level holds two
// directory descriptors open, and a guest can nest directories without end.
const maxCopyDepth = 256

// CopyTree copies the contents of the host directory src into the existing
// host directory dst. Every name below src is the guest's: it is read from
// directory file descriptors one level at a time, never through a symlink
// (a symlink is copied as a link, its target never read or followed),
// regular files by content, directories with their permission bits.
// Devices, FIFOs and sockets are skipped; their names are returned. When
// the process runs as root, owners are kept, so the guest's user still
// owns its files. dst must be fresh: an existing name in it is an error.
func CopyTree(ctx context.Context, src, dst string) (skipped []string, err error) {
	sfd, err := unix.Open(src, dirFlags, 0)
	if err != nil {
		return nil, fmt.Errorf("copy %s: open source: %w", src, err)
	}
	defer unix.Close(sfd)
	dfd, err := unix.Open(dst, dirFlags, 0)
	if err != nil {
		return nil, fmt.Errorf("copy %s: open destination %s: %w", src, dst, err)
	}
	defer unix.Close(dfd)
	c := copier{ctx: ctx, keepOwner: os.Geteuid() == 0}
	if err := c.dir(sfd, dfd, ".", 0); err != nil {
		return c.skipped, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return c.skipped, nil
}

type copier struct {
	ctx       context.Context
	keepOwner bool
	skipped   []string
}

// dir copies the entries of the directory sfd into the directory dfd; rel
// names sfd in messages.
func (c *copier) dir(sfd, dfd int, rel string, depth int) error {
	if depth > maxCopyDepth {
		return fmt.Errorf("%s: directories nested deeper than %d levels", rel, maxCopyDepth)
	}
	names, err := readNames(sfd)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	for _, name := range names {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		path := name
		if rel != "." {
			path = rel + "/" + name
		}
		var st unix.Stat_t
		if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone since the listing
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			err = c.subdir(sfd, dfd, name, path, &st, depth)
		case unix.S_IFREG:
			err = c.file(sfd, dfd, name)
		case unix.S_IFLNK:
			err = c.link(sfd, dfd, name, &st)
		default:
			c.skipped = append(c.skipped, path)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

func (c *copier) subdir(sfd, dfd int, name, path string, st *unix.Stat_t, depth int) error {
	child, err := unix.Openat(sfd, name, dirFlags, 0)
	if err != nil {
		return err // a name swapped for a symlink fails here (O_NOFOLLOW)
	}
	defer unix.Close(child)
	if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
		return err
	}
	out, err := unix.Openat(dfd, name, dirFlags, 0)
	if err != nil {
		return err
	}
	defer unix.Close(out)
	if err := c.dir(child, out, path, depth+1); err != nil {
		return err
	}
	return c.attrs(out, st)
}

func (c *copier) file(sfd, dfd int, name string) error {
	// O_NONBLOCK: a name swapped for a FIFO since the stat must not block
	// the open; the fstat below then refuses it.
	in, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	inf := os.NewFile(uintptr(in), name)
	defer inf.Close()
	var now unix.Stat_t
	if err := unix.Fstat(in, &now); err != nil {
		return err
	}
	if now.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("changed from a regular file while being copied")
	}
	out, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	outf := os.NewFile(uintptr(out), name)
	defer outf.Close()
	if _, err := io.Copy(outf, inf); err != nil {
		return err
	}
	if err := c.attrs(out, &now); err != nil {
		return err
	}
	return outf.Close()
}

func (c *copier) link(sfd, dfd int, name string, st *unix.Stat_t) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(sfd, name, buf)
	if err != nil {
		return err
	}
	if n == len(buf) {
		return errors.New("symlink target too long")
	}
	if err := unix.Symlinkat(string(buf[:n]), dfd, name); err != nil {
		return err
	}
	if c.keepOwner {
		return unix.Fchownat(dfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// attrs gives the copy fd the permission bits (and, as root, the owner) of
// st; set-id bits are dropped.
func (c *copier) attrs(fd int, st *unix.Stat_t) error {
	if c.keepOwner {
		if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	return unix.Fchmod(fd, uint32(st.Mode)&0o1777)
}

// readNames lists the directory fd without moving fd's own offset: it
// reads through a duplicate opened afresh.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", dirFlags, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}
