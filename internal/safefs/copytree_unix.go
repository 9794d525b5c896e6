//go:build linux || darwin

package safefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// CopyTree copies the contents of the host directory src into the existing
// host directory dst. Every name below src is the guest's: it is read from
// directory file descriptors one level at a time, never through a symlink
// (a symlink is copied as a link, its target never read or followed) nor,
// on Linux, into another mount (a mount point is skipped), regular files
// by content, directories with their permission bits, both with their
// user.* extended attributes (see userXattrPrefix). Devices, FIFOs and
// sockets are skipped too; the names skipped are returned. When the
// process runs as root, owners are kept, so the guest's user still owns
// its files. dst must be fresh: an existing name in it is an error.
//
// Any depth is copied with a handful of descriptors: the copy holds the
// source directory it is in and that directory's copy, and goes back up
// through "..", checked against the identities recorded on the way down;
// a directory the guest moves meanwhile makes the copy fail with
// ErrMoved rather than go on wherever ".." now leads.
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
	c := copier{ctx: ctx, keepOwner: os.Geteuid() == 0, src: sfd, dst: -1, root: -1, max: maxBytes, copies: map[ident]string{}}
	defer c.close()
	c.root, err = unix.Open(dst, dirFlags, 0)
	if err != nil {
		return nil, fmt.Errorf("copy %s: open destination %s: %w", src, dst, err)
	}
	if c.dst, err = unix.Dup(c.root); err == nil {
		err = c.walk()
	}
	if err != nil {
		err = fmt.Errorf("copy %s to %s: %w", src, dst, err)
		if cerr := emptyAt(c.root); cerr != nil {
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
	root      int              // the destination's root
	src, dst  int              // the source directory being copied, and its copy
	stack     []level          // the source directories from src down to the current one
	max, used int64            // file data bytes: the budget, and written
	copies    map[ident]string // a copied hard-linked file's path below dst
}

// level is one source directory on the way down: its listing, how far the
// copy is through it, its path below src, its attributes, and the
// identities of it and its copy, to recognise them again from "..".
type level struct {
	names    []string
	next     int
	rel      string
	st       unix.Stat_t
	src, dst ident
}

func (c *copier) close() {
	for _, fd := range []int{c.src, c.dst, c.root} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

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

// walk copies the tree below c.src into c.dst, depth first. Its errors
// name the path below src they concern.
func (c *copier) walk() error {
	var root level
	if err := unix.Fstat(c.src, &root.st); err != nil {
		return err
	}
	root.src, root.rel = identOfStat(&root.st), "."
	var err error
	if root.dst, err = identOf(c.dst); err != nil {
		return err
	}
	if root.names, err = readNames(c.src); err != nil {
		return err
	}
	c.stack = []level{root}
	for {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		top := &c.stack[len(c.stack)-1]
		if top.next == len(top.names) {
			if len(c.stack) == 1 {
				return nil // dst's own attributes are the caller's
			}
			rel := top.rel
			if err := c.up(); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			continue
		}
		name := top.names[top.next]
		top.next++
		path := name
		if top.rel != "." {
			path = top.rel + "/" + name
		}
		var st unix.Stat_t
		if err := unix.Fstatat(c.src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone since the listing
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			err = c.down(name, path)
		case unix.S_IFREG:
			err = c.file(name, path, &st)
		case unix.S_IFLNK:
			err = c.link(name, &st)
		default:
			c.skipped = append(c.skipped, path)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}

// down copies the directory name of c.src: it makes its copy and, unless
// it is empty, makes it the current directory. An empty one is finished
// at once, so one its owner may not search needs no "..".
func (c *copier) down(name, path string) error {
	child, err := openNoFollow(c.src, name)
	if errors.Is(err, unix.EXDEV) {
		c.skipped = append(c.skipped, path) // another mount: not the guest's tree
		return nil
	}
	if err != nil {
		// A name swapped for a symlink fails here.
		return err
	}
	l := level{rel: path}
	out := -1
	defer func() {
		// Both are kept only once they are the current directory.
		if child != c.src {
			unix.Close(child)
		}
		if out >= 0 && out != c.dst {
			unix.Close(out)
		}
	}()
	if err := unix.Fstat(child, &l.st); err != nil {
		return err
	}
	if l.names, err = readNames(child); err != nil {
		return err
	}
	if err := unix.Mkdirat(c.dst, name, 0o700); err != nil {
		return err
	}
	if out, err = unix.Openat(c.dst, name, dirFlags, 0); err != nil {
		return err
	}
	if len(l.names) == 0 {
		return c.attrs(child, out, &l.st)
	}
	if l.dst, err = identOf(out); err != nil {
		return err
	}
	l.src = identOfStat(&l.st)
	c.stack = append(c.stack, l)
	unix.Close(c.src)
	unix.Close(c.dst)
	c.src, c.dst = child, out
	return nil
}

// up leaves the current directory, whose entries are all copied, for its
// parent: through "..", on both sides, checked against the identities
// recorded on the way down. The copy gets its attributes last, once its
// ".." is open, as they may take away its search permission.
func (c *copier) up() error {
	top, parent := &c.stack[len(c.stack)-1], &c.stack[len(c.stack)-2]
	src, err := openParentOf(c.src, parent.src)
	if err != nil {
		return err
	}
	dst, err := openParentOf(c.dst, parent.dst)
	if err != nil {
		unix.Close(src)
		return err
	}
	err = c.attrs(c.src, c.dst, &top.st)
	unix.Close(c.src)
	unix.Close(c.dst)
	c.src, c.dst = src, dst
	c.stack = c.stack[:len(c.stack)-1]
	return err
}

// openParentOf opens ".." of dirfd and checks that it is the directory
// want: the one dirfd was opened from.
func openParentOf(dirfd int, want ident) (int, error) {
	fd, id, err := openParent(dirfd)
	if err != nil {
		return -1, err
	}
	if id != want {
		unix.Close(fd)
		return -1, ErrMoved
	}
	return fd, nil
}

// file copies the regular file name of c.src into c.dst; path is its path
// below src.
func (c *copier) file(name, path string, st *unix.Stat_t) error {
	if first, ok := c.copies[identOfStat(st)]; ok && st.Nlink > 1 {
		// A directory already made unsearchable, or no longer there, gets
		// a copy instead.
		if err := c.linkCopy(first, name); err == nil {
			return nil
		}
	}
	// O_NONBLOCK: a name swapped for a FIFO since the stat must not block
	// the open; the fstat below then refuses it.
	in, err := unix.Openat(c.src, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
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
	out, err := unix.Openat(c.dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	outf := os.NewFile(uintptr(out), name)
	defer outf.Close()
	if err := c.data(inf, outf, now.Size); err != nil {
		return err
	}
	if err := c.attrs(in, out, &now); err != nil {
		return err
	}
	if err := outf.Close(); err != nil {
		return err
	}
	if now.Nlink > 1 {
		c.copies[identOfStat(&now)] = path
	}
	return nil
}

// linkCopy links name in c.dst to the copy at first, a path below dst's
// root. The guest may write to the copy while it is made, so first's
// directories are opened one name at a time, never through a symlink:
// linkat on the path would follow one swapped in for a host directory,
// and link a host file into the guest's tree.
func (c *copier) linkCopy(first, name string) error {
	fd, err := unix.Dup(c.root)
	if err != nil {
		return err
	}
	segs := strings.Split(first, "/")
	for _, seg := range segs[:len(segs)-1] {
		next, err := openNoFollow(fd, seg)
		unix.Close(fd)
		if err != nil {
			return err
		}
		fd = next
	}
	defer unix.Close(fd)
	return unix.Linkat(fd, segs[len(segs)-1], c.dst, name, 0)
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

func (c *copier) link(name string, st *unix.Stat_t) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(c.src, name, buf)
	if err != nil {
		return err
	}
	if n == len(buf) {
		return errors.New("symlink target too long")
	}
	if err := unix.Symlinkat(string(buf[:n]), c.dst, name); err != nil {
		return err
	}
	if c.keepOwner {
		return unix.Fchownat(c.dst, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// attrs gives the copy out the user.* extended attributes of in, whose
// bytes count against the budget, and the permission bits (and, as root,
// the owner) of st; set-id bits are dropped.
func (c *copier) attrs(in, out int, st *unix.Stat_t) error {
	n, err := copyXattrs(in, out)
	c.used += n
	if err != nil {
		return err
	}
	if c.used > c.max {
		return fmt.Errorf("%w: more than %d bytes of file data and extended attributes", ErrCopyBudget, c.max)
	}
	if c.keepOwner {
		if err := unix.Fchown(out, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	return unix.Fchmod(out, uint32(st.Mode)&0o1777)
}
