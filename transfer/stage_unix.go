//go:build unix

package transfer

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/outputs"
)

// stage holds fetched files in a private directory inside dest (so moving
// them in is a rename on one file system) until the whole fetch verified.
// Everything below dest is reached from directory descriptors with
// O_NOFOLLOW: a symlink already in dest, wherever it points, is never
// followed. dest itself is the caller's path and may be a symlink.
type stage struct {
	dest     string
	destDir  *os.File
	created  []string // dest and missing parents made for this collection, outermost first
	dir      *os.File // the staging directory, mode 0700
	name     string   // its name inside dest
	staged   map[string]string
	placed   int
	leftover []string // names made in the staging directory
}

func openStage(dest string) (*stage, error) {
	st := &stage{dest: dest, staged: map[string]string{}}
	if err := st.makeDest(); err != nil {
		st.close() // removes the parents made before the failure
		return nil, err
	}
	// O_DIRECTORY: opening a FIFO to read would wait for a writer.
	d, err := os.OpenFile(dest, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if errors.Is(err, unix.ENOTDIR) {
		err = fmt.Errorf("%s is not a directory", dest)
	}
	st.destDir = d
	if err == nil {
		err = st.makeStagingDir()
	}
	if err != nil {
		st.close()
		return nil, err
	}
	return st, nil
}

// makeDest creates dest and its missing parents, remembering them so a
// collection that places nothing removes them again.
func (st *stage) makeDest() error {
	var missing []string
	for p := filepath.Clean(st.dest); ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		missing = append(missing, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil {
			return err
		}
		st.created = append(st.created, missing[i])
	}
	return nil
}

func (st *stage) makeStagingDir() error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	st.name = ".oma-outputs-" + hex.EncodeToString(b[:])
	dfd := int(st.destDir.Fd())
	if err := unix.Mkdirat(dfd, st.name, 0o700); err != nil {
		st.name = ""
		return fmt.Errorf("make staging directory in %s: %w", st.dest, err)
	}
	fd, err := unix.Openat(dfd, st.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open staging directory in %s: %w", st.dest, err)
	}
	st.dir = os.NewFile(uintptr(fd), st.name)
	return nil
}

func (st *stage) dirFD() int { return int(st.dir.Fd()) }

// sink stages one record's bytes under a fresh name.
func (st *stage) sink(r outputs.Record) (io.Writer, func(ok bool) error, error) {
	name := strconv.Itoa(len(st.leftover))
	fd, err := unix.Openat(st.dirFD(), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("stage %q: %w", r.Path, err)
	}
	f := os.NewFile(uintptr(fd), name)
	st.leftover = append(st.leftover, name)
	return f, func(ok bool) error {
		err := f.Close()
		if ok && err == nil {
			st.staged[r.Path] = name
		}
		return err
	}, nil
}

// undo reverses one step of install, acting in the directory rel below
// dest (the cursor's, once moved there); what names the step in an error,
// which says what stays in dest.
type undo struct {
	rel  string
	what string
	do   func(dir int) error
}

// install moves the staged files into dest in order. A file is refused
// (and the others placed) when a directory on its way is a symlink or not a
// directory on the host, or when its place is taken by something that is
// not a regular file, or by a regular file with other bytes and overwrite
// is off. A file already there with the same bytes counts as collected. Any
// other failure undoes every step taken and returns the error. However deep
// the files, it holds one directory descriptor besides dest's (a cursor).
func (st *stage) install(files []File, overwrite bool) (placed []File, refused []outputs.Refusal, err error) {
	c := &cursor{st: st, root: int(st.destDir.Fd())}
	c.fd, c.rel = c.root, "."
	var undos []undo
	defer func() {
		defer c.release()
		if err != nil {
			var errs []error
			for i := len(undos) - 1; i >= 0; i-- {
				u := undos[i]
				reason, uerr := c.moveTo(u.rel, nil)
				if uerr == nil && reason != "" {
					uerr = errors.New(reason)
				}
				if uerr == nil {
					if uerr = u.do(c.fd); uerr != nil {
						uerr = fmt.Errorf("%s: %w", u.what, uerr)
					}
				}
				if uerr != nil {
					errs = append(errs, uerr)
				}
			}
			if len(errs) > 0 {
				err = fmt.Errorf("%w (and undoing what was placed: %w)", err, errors.Join(errs...))
			}
			placed, refused = nil, nil
		}
	}()
	for _, f := range files {
		if first, _, _ := strings.Cut(f.Path, "/"); first == st.name {
			refused = append(refused, outputs.Refusal{Path: f.Path, Reason: "its name is the collection's staging directory"})
			continue
		}
		dir := path.Dir(f.Path)
		reason, err := c.moveTo(dir, &undos)
		if err != nil {
			return nil, nil, err
		}
		if reason == "" {
			reason, err = st.place(c.fd, dir, path.Base(f.Path), f, overwrite, &undos)
			if err != nil {
				return nil, nil, err
			}
		}
		if reason != "" {
			refused = append(refused, outputs.Refusal{Path: f.Path, Reason: reason})
			continue
		}
		placed = append(placed, f)
	}
	st.placed = len(placed)
	return placed, refused, nil
}

// fileID is a directory's identity.
type fileID struct{ dev, ino uint64 }

// cursor is the one directory below dest that install holds open. It moves
// down one segment at a time without following links, and up through "..",
// which must lead to the directory it came down through, so a directory
// moved meanwhile fails the move rather than lead elsewhere. It keeps the
// identities of the directories on its way down only (not of every one it
// visited): memory grows with a path's depth, not with the outputs' total.
type cursor struct {
	st    *stage
	root  int      // dest's descriptor, not the cursor's to close
	fd    int      // the directory at rel
	rel   string   // "." for dest
	chain []fileID // the identities of the directories from dest's child to rel
}

func (c *cursor) release() {
	if c.fd != c.root {
		unix.Close(c.fd)
	}
	c.fd, c.rel, c.chain = c.root, ".", c.chain[:0]
}

// enter makes the cursor hold fd, the directory at rel: a directory below
// it, or (up) its parent reached through "..", which must be the directory
// it came down through.
func (c *cursor) enter(fd int, rel string, up bool) error {
	var s unix.Stat_t
	if err := unix.Fstat(fd, &s); err != nil {
		unix.Close(fd)
		return fmt.Errorf("inspect directory %s: %w", c.st.hostPath(rel), err)
	}
	id := fileID{uint64(s.Dev), uint64(s.Ino)}
	if up {
		if id != c.chain[len(c.chain)-2] {
			unix.Close(fd)
			return fmt.Errorf("directory %s moved during the collection", c.st.hostPath(rel))
		}
		c.chain = c.chain[:len(c.chain)-1]
	} else {
		c.chain = append(c.chain, id)
	}
	if c.fd != c.root {
		unix.Close(c.fd)
	}
	c.fd, c.rel = fd, rel
	return nil
}

// moveTo moves the cursor to dest/rel. Given undos, it creates what is
// missing (recording how to remove it); without, a missing directory is an
// error. reason is set, and the cursor left on the way, when the host has a
// symlink or a non-directory there.
func (c *cursor) moveTo(rel string, undos *[]undo) (reason string, err error) {
	for c.rel != "." && rel != c.rel && !strings.HasPrefix(rel, c.rel+"/") {
		up := path.Dir(c.rel)
		if up == "." {
			c.release()
			break
		}
		fd, err := unix.Openat(c.fd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("open directory %s: %w", c.st.hostPath(up), err)
		}
		if err := c.enter(fd, up, true); err != nil {
			return "", err
		}
	}
	for c.rel != rel {
		rest := rel
		if c.rel != "." {
			rest = rel[len(c.rel)+1:]
		}
		seg, _, _ := strings.Cut(rest, "/")
		reason, err := c.down(seg, undos)
		if err != nil || reason != "" {
			return reason, err
		}
	}
	return "", nil
}

// down moves the cursor into its directory seg, without following a link.
func (c *cursor) down(seg string, undos *[]undo) (reason string, err error) {
	parent, parentRel := c.fd, c.rel
	rel := path.Join(parentRel, seg)
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(parent, seg, flags, 0)
	if errors.Is(err, unix.ENOENT) && undos != nil {
		if err = unix.Mkdirat(parent, seg, 0o755); err == nil {
			*undos = append(*undos, undo{parentRel, "remove directory " + c.st.hostPath(rel), func(dir int) error { return unix.Unlinkat(dir, seg, unix.AT_REMOVEDIR) }})
		} else if !errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("make directory %s: %w", c.st.hostPath(rel), err)
		}
		fd, err = unix.Openat(parent, seg, flags, 0)
	}
	switch {
	case err == nil:
		return "", c.enter(fd, rel, false)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EMLINK), errors.Is(err, unix.ENOTDIR):
		var fi unix.Stat_t
		if unix.Fstatat(parent, seg, &fi, unix.AT_SYMLINK_NOFOLLOW) == nil && fi.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Sprintf("%s is a symbolic link on the host; not followed", c.st.hostPath(rel)), nil
		}
		return fmt.Sprintf("%s is not a directory on the host", c.st.hostPath(rel)), nil
	}
	return "", fmt.Errorf("open directory %s: %w", c.st.hostPath(rel), err)
}

// place moves f's staged file to base in parent, the directory dir.
func (st *stage) place(parent int, dir, base string, f File, overwrite bool, undos *[]undo) (reason string, err error) {
	staged := st.staged[f.Path]
	host := st.hostPath(f.Path)
	var existing unix.Stat_t
	err = unix.Fstatat(parent, base, &existing, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return "", fmt.Errorf("inspect %s: %w", host, err)
	case existing.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Sprintf("%s exists on the host and is not a regular file; not replaced", host), nil
	case sameContent(parent, base, f):
		return "", nil
	case !overwrite:
		return fmt.Sprintf("%s exists on the host with other content; not replaced without overwrite", host), nil
	default:
		old := staged + ".old"
		if err := unix.Renameat(parent, base, st.dirFD(), old); err != nil {
			return "", fmt.Errorf("set aside %s: %w", host, err)
		}
		st.leftover = append(st.leftover, old)
		*undos = append(*undos, undo{dir, "put back " + host, func(dir int) error { return unix.Renameat(st.dirFD(), old, dir, base) }})
	}
	// link(2) never replaces: a file that appeared meanwhile is kept.
	err = unix.Linkat(st.dirFD(), staged, parent, base, 0)
	if errors.Is(err, unix.EEXIST) {
		return fmt.Sprintf("%s appeared on the host during the collection; not replaced", host), nil
	}
	if err != nil && !errors.Is(err, unix.EXDEV) {
		// A file system without hard links: rename into the place that was
		// free a moment ago.
		err = unix.Renameat(st.dirFD(), staged, parent, base)
	}
	if err != nil {
		return "", fmt.Errorf("place %s: %w", host, err)
	}
	*undos = append(*undos, undo{dir, "remove " + host, func(dir int) error { return unix.Unlinkat(dir, base, 0) }})
	return "", nil
}

// sameContent reports whether the regular file base in parent holds
// exactly f's bytes.
func sameContent(parent int, base string, f File) bool {
	fd, err := unix.Openat(parent, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	file := os.NewFile(uintptr(fd), base)
	defer file.Close()
	fi, err := file.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != f.Size {
		return false
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(file, f.Size+1)); err != nil {
		return false
	}
	return hex.EncodeToString(h.Sum(nil)) == f.SHA256
}

func (st *stage) hostPath(rel string) string {
	return filepath.Join(st.dest, filepath.FromSlash(rel))
}

// close removes the staging directory and, when nothing was placed, the
// directories made for dest.
func (st *stage) close() {
	if st.dir != nil {
		for _, name := range st.leftover {
			_ = unix.Unlinkat(st.dirFD(), name, 0)
		}
		st.dir.Close()
	}
	if st.name != "" {
		_ = unix.Unlinkat(int(st.destDir.Fd()), st.name, unix.AT_REMOVEDIR)
	}
	if st.destDir != nil {
		st.destDir.Close()
	}
	if st.placed == 0 {
		for i := len(st.created) - 1; i >= 0; i-- {
			_ = os.Remove(st.created[i])
		}
	}
}
