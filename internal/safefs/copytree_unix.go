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
//
// A guest can make a small tree look huge, so the copy writes no more
// than the source holds: the names of a hard-linked file stay links to
// one copy, holes stay holes (only the data SEEK_DATA finds is copied, up
// to the size the file had when opened), and past maxBytes of file data
// the copy fails with ErrCopyBudget. On any error dst is emptied again.
func CopyTree(ctx context.Context, src, dst string, maxBytes int64) (skipped []string, err error) {
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
	c := copier{ctx: ctx, keepOwner: os.Geteuid() == 0, dst: dfd, max: maxBytes, copies: map[inode]string{}}
	if err := c.dir(sfd, dfd, ".", 0); err != nil {
		err = fmt.Errorf("copy %s to %s: %w", src, dst, err)
		if cerr := emptyAt(dfd); cerr != nil {
			err = fmt.Errorf("%w; emptying %s again: %w", err, dst, cerr)
		}
		return nil, err
	}
	return c.skipped, nil
}

type copier struct {
	ctx       context.Context
	keepOwner bool
	skipped   []string
	dst       int              // the destination's root
	max, used int64            // file data bytes: the budget, and written
	copies    map[inode]string // a copied hard-linked file's path below dst
}

type inode struct{ dev, ino uint64 }

// emptyAt removes every entry of the directory fd.
func emptyAt(fd int) error {
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := removeAt(fd, name); err != nil {
			return err
		}
	}
	return nil
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
			// Its errors name their own paths: wrapping them again at
			// every level would make a deep tree's message quadratic.
			if err := c.subdir(sfd, dfd, name, path, &st, depth); err != nil {
				return err
			}
		case unix.S_IFREG:
			err = c.file(sfd, dfd, name, path, &st)
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
		// A name swapped for a symlink fails here (O_NOFOLLOW).
		return fmt.Errorf("%s: %w", path, err)
	}
	defer unix.Close(child)
	if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out, err := unix.Openat(dfd, name, dirFlags, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer unix.Close(out)
	if err := c.dir(child, out, path, depth+1); err != nil {
		return err
	}
	if err := c.attrs(out, st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func (c *copier) file(sfd, dfd int, name, path string, st *unix.Stat_t) error {
	id := inode{uint64(st.Dev), uint64(st.Ino)}
	if first, ok := c.copies[id]; ok && st.Nlink > 1 {
		// Resolved from dst's root through directories this copy made; a
		// directory it already made unsearchable gets a copy instead.
		if err := unix.Linkat(c.dst, first, dfd, name, 0); err == nil {
			return nil
		}
	}
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
	if err := c.data(inf, outf, now.Size); err != nil {
		return err
	}
	if err := c.attrs(out, &now); err != nil {
		return err
	}
	if err := outf.Close(); err != nil {
		return err
	}
	if now.Nlink > 1 {
		c.copies[inode{uint64(now.Dev), uint64(now.Ino)}] = path
	}
	return nil
}

// data copies the first size bytes of in to out, holes as holes: only the
// extents SEEK_DATA finds are read and charged to the budget.
func (c *copier) data(in, out *os.File, size int64) error {
	for off := int64(0); off < size; {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		start, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO):
			start = size // only a hole is left
		case errors.Is(err, unix.EINVAL):
			start = off // no SEEK_DATA here: all of it is data
		case err != nil:
			return err
		}
		if start >= size {
			break
		}
		end, err := unix.Seek(int(in.Fd()), start, unix.SEEK_HOLE)
		if err != nil || end > size {
			end = size
		}
		if c.used+end-start > c.max {
			return fmt.Errorf("%w: more than %d bytes of file data", ErrCopyBudget, c.max)
		}
		n, err := io.Copy(io.NewOffsetWriter(out, start), io.NewSectionReader(in, start, end-start))
		c.used += n
		if err != nil {
			return err
		}
		if n < end-start {
			break // the file shrank while being copied
		}
		off = end
	}
	return out.Truncate(size)
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
