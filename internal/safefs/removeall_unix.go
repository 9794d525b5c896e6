//go:build unix

package safefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxRounds bounds how often removal starts over on a tree that keeps
// changing under it.
const maxRounds = 1000

// RemoveAll removes path and everything below it. A missing path is not an
// error. path itself is trusted: when it is a symlink, the link is removed,
// not its target. Below it, symlinks are unlinked, never followed;
// directories are opened with O_NOFOLLOW (and, on Linux, openat2 refusing
// symlinks, magic links and mount crossings) and made writable through
// that descriptor only; at most a handful of descriptors are open at once.
func RemoveAll(path string) error {
	path = filepath.Clean(path)
	dir, name := filepath.Split(path)
	if name == "" || name == "." || name == ".." || name == "/" {
		return fmt.Errorf("safefs: refusing to remove %q", path)
	}
	if dir == "" {
		dir = "."
	}
	parent, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(parent)
	if err := removeAt(parent, name); err != nil {
		return fmt.Errorf("safefs: removing %s: %w", path, err)
	}
	return nil
}

// removeAt removes the entry name of the directory parent, whatever it is.
func removeAt(parent int, name string) error {
	for round := 0; ; round++ {
		done, err := removeEntry(parent, name, false)
		if done || err != nil {
			return err
		}
		if round == maxRounds {
			return fmt.Errorf("%s keeps changing: gave up after %d rounds", name, maxRounds)
		}
		if err := emptyDir(parent, name); err != nil {
			return err
		}
	}
}

// removeEntry unlinks name, or removes it as an empty directory. It
// reports false, with no error, when name is a directory with entries.
// isDir says the listing saw a directory: the unlink is not tried then.
func removeEntry(parent int, name string, isDir bool) (bool, error) {
	if !isDir {
		err := unix.Unlinkat(parent, name, 0)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return true, nil
		case !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM):
			return false, &os.PathError{Op: "unlinkat", Path: name, Err: err}
		}
	}
	err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return true, nil
	case errors.Is(err, unix.ENOTDIR) && isDir:
		// Listed as a directory, no longer one: unlink it.
		return removeEntry(parent, name, false)
	case errors.Is(err, unix.ENOTDIR):
		// Swapped back and forth under us: look again.
		return false, nil
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return false, nil
	}
	return false, &os.PathError{Op: "rmdir", Path: name, Err: err}
}

// ident is a directory's identity, to recognise it again from "..".
type ident struct{ dev, ino uint64 }

// frame is one directory on the way down from the top: its name in its
// parent and its parent's identity.
type frame struct {
	name   string
	parent ident
}

// emptyDir removes everything below parent/name, depth first, holding only
// the top directory, the current one and briefly its parent open. Going up
// goes through "..", checked against the identity recorded on the way
// down; a mismatch (the guest moved a directory) starts over from the top.
func emptyDir(parent int, name string) error {
	top, topID, err := openDir(parent, name)
	if err != nil {
		return skipSwapped(err)
	}
	defer unix.Close(top)
	cur, err := unix.Dup(top)
	if err != nil {
		return err
	}
	curID := topID
	defer func() { unix.Close(cur) }()
	var stack []frame
	restart := func() error {
		unix.Close(cur)
		stack = stack[:0]
		cur, curID = -1, topID
		fd, err := unix.Dup(top)
		if err != nil {
			return err
		}
		cur = fd
		return nil
	}
	buf := make([]byte, 32<<10)
	fresh := true // cur was just opened: its offset is at the start
	for rounds := 0; ; {
		ents, err := readEntries(cur, buf, !fresh)
		if errors.Is(err, unix.ENOENT) {
			// cur was removed meanwhile, by another removal of the same
			// tree: removeAt looks at the top again.
			return nil
		}
		if err != nil {
			return err
		}
		fresh = false
		if len(ents) == 0 {
			if len(stack) == 0 {
				return nil
			}
			up, upID, err := openParent(cur)
			f := stack[len(stack)-1]
			if err != nil || upID != f.parent {
				if err == nil {
					unix.Close(up)
				}
				if rounds++; rounds > maxRounds {
					return fmt.Errorf("%s keeps changing: gave up after %d rounds", name, maxRounds)
				}
				if err := restart(); err != nil {
					return err
				}
				fresh = false
				continue
			}
			unix.Close(cur)
			cur, curID, stack, fresh = up, upID, stack[:len(stack)-1], true
			if _, err := removeEntry(cur, f.name, true); err != nil {
				return err
			}
			continue
		}
		for _, e := range ents {
			n := e.name
			done, err := removeEntry(cur, n, e.isDir)
			if err != nil {
				return err
			}
			if done {
				continue
			}
			child, childID, err := openDir(cur, n)
			if err != nil {
				if err = skipSwapped(err); err != nil {
					return err
				}
				continue
			}
			stack = append(stack, frame{name: n, parent: curID})
			unix.Close(cur)
			cur, curID, fresh = child, childID, true
			break
		}
	}
}

// skipSwapped drops the errors of an entry that stopped being a directory
// between listing and opening; it is looked at again on the next read.
func skipSwapped(err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil
	}
	return err
}

// openDir opens the directory name of dirfd without following a symlink
// and makes it readable, writable and searchable by its owner through
// the descriptor, so a guest's chmod cannot pin its contents.
func openDir(dirfd int, name string) (int, ident, error) {
	fd, err := openNoFollow(dirfd, name)
	if errors.Is(err, unix.EACCES) {
		// Not readable by us: fix the mode on the inode itself, reached
		// through a descriptor that cannot be a symlink, then open again.
		if err = chmodNoFollow(dirfd, name); err == nil {
			fd, err = openNoFollow(dirfd, name)
		}
	}
	if err != nil {
		return -1, ident{}, &os.PathError{Op: "open", Path: name, Err: err}
	}
	id, err := writable(fd)
	if err != nil {
		unix.Close(fd)
		return -1, ident{}, &os.PathError{Op: "chmod", Path: name, Err: err}
	}
	return fd, id, nil
}

// openParent opens ".." of dirfd; ".." is never a symlink.
func openParent(dirfd int) (int, ident, error) {
	fd, err := unix.Openat(dirfd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, ident{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, ident{}, err
	}
	return fd, ident{uint64(st.Dev), uint64(st.Ino)}, nil
}

// writable gives the directory fd owner rwx if it lacks any of them.
func writable(fd int) (ident, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return ident{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return ident{}, unix.ENOTDIR
	}
	if st.Mode&0o700 != 0o700 {
		if err := unix.Fchmod(fd, uint32(st.Mode&0o7777|0o700)); err != nil {
			return ident{}, err
		}
	}
	return ident{uint64(st.Dev), uint64(st.Ino)}, nil
}

// entry is one name of a directory listing; isDir is the listing's type,
// a hint only (the entry may change before it is acted on).
type entry struct {
	name  string
	isDir bool
}
