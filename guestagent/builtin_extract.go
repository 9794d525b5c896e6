//go:build linux

package guestagent

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// extract is the guest side of transfer.Materialize: it extracts the tar
// archive on stdin (directories and regular files only) below a root, as
// the call's user, following no symbolic link below the root: a link or
// file where a directory belongs is replaced by the directory, and a file
// is written to a temporary name and renamed over whatever its name held.
// Directories it passes get mode 755, files 444, and a skill file below a
// scripts directory 555. Its args: the kind, uploads or skills, and the
// root.
//
// uploads are extracted as root below a root that is root's alone: it must
// be a real directory owned by the extracting user and writable by no one
// else, so nothing the agent made can redirect a write. skills are
// extracted as the agent's own user below a root in its workspace (made if
// missing), where the agent may have planted anything, so the files are
// written with no more rights than it has.
func extract(c *builtinCall) int {
	if len(c.Args) != 2 {
		return c.badArgs(agentwire.BuiltinExtract, 2)
	}
	kind, root := c.Args[0], c.userPath(c.Args[1])
	if kind != "uploads" && kind != "skills" {
		fmt.Fprintf(c.Stderr, "%s: unknown kind %q (want uploads or skills)\n", agentwire.BuiltinExtract, kind)
		return 2
	}
	return asCallUser(c, func() int {
		x := extraction{c: c, root: c.Args[1], scripts: kind == "skills"}
		rootFD, err := x.openRoot(root)
		if err != nil {
			fmt.Fprintln(c.Stderr, err)
			return 1
		}
		defer unix.Close(rootFD)
		defer x.last.release()
		if err := x.all(rootFD); err != nil {
			if c.ending() {
				return killedExit
			}
			fmt.Fprintf(c.Stderr, "%s: %v\n", agentwire.BuiltinExtract, err)
			return 1
		}
		return 0
	})
}

type extraction struct {
	c       *builtinCall
	root    string // as given, for messages and the scripts rule
	scripts bool   // skills: files below a scripts directory are executable
	// last is the directory the last file went to: the archive lists a
	// directory's files together, so its path is walked (and its modes
	// set) once, not once per file. Nothing this extraction does can
	// replace a directory it made, and what the agent's user does to one
	// it holds gains it nothing: files are written with its rights.
	last heldDir
}

// heldDir is an open directory and the path it was opened at.
type heldDir struct {
	path string
	fd   int
	held bool
}

// open returns the directory at path, by open unless it is the one held;
// the one returned is held until the next open or release.
func (d *heldDir) open(path string, open func() (int, error)) (int, error) {
	if d.held && d.path == path {
		return d.fd, nil
	}
	fd, err := open()
	if err != nil {
		return -1, err
	}
	d.release()
	d.path, d.fd, d.held = path, fd, true
	return fd, nil
}

func (d *heldDir) release() {
	if d.held {
		unix.Close(d.fd)
		d.held = false
	}
}

// openRoot opens the root to extract below, checking that an uploads root
// is root's alone on the very directory opened.
func (x *extraction) openRoot(root string) (int, error) {
	if x.scripts {
		if !mkdirs(root, 0o755) {
			return -1, fmt.Errorf("cannot make the skills root %s", x.root)
		}
		fd, err := retryEINTR(func() (int, error) {
			return unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		})
		if err != nil {
			return -1, fmt.Errorf("cannot enter the skills root %s: %s", x.root, errText(err))
		}
		return fd, nil
	}
	fd, err := openNoFollow(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return -1, fmt.Errorf("uploads root %s is not a directory", x.root)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Uid != x.c.User.uid || st.Mode&0o022 != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("uploads root %s is not owned by %d alone; refusing to extract there", x.root, x.c.User.uid)
	}
	return fd, nil
}

// all extracts every entry of the archive on stdin.
func (x *extraction) all(rootFD int) error {
	tr := tar.NewReader(x.c.Stdin)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the archive: %v", err)
		}
		if x.c.ending() {
			return errCallEnding
		}
		name := strings.TrimSuffix(h.Name, "/")
		if !localPath(name) {
			return fmt.Errorf("refusing %q: not a plain relative path", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = x.dir(rootFD, name)
		case tar.TypeReg:
			err = x.file(rootFD, name, tr)
		default:
			err = fmt.Errorf("refusing %q: only directories and regular files are extracted, not tar type %q", h.Name, h.Typeflag)
		}
		if err != nil {
			return err
		}
	}
}

// dirs opens the directory at the local path dir below rootFD, making
// what is missing and replacing what is not a directory, each passed
// directory set to 755 (the root itself is left as it is).
func (x *extraction) dirs(rootFD int, dir string) (int, error) {
	fd, err := walkBeneath(rootFD, dir, x.subdir)
	if err != nil {
		return -1, fmt.Errorf("cannot make directory %s below %s: %s", dir, x.root, errText(err))
	}
	return fd, nil
}

// subdir opens (making or replacing it) the directory name in fd.
func (x *extraction) subdir(fd int, name string) (int, error) {
	sub, err := openNoFollow(fd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		if err = unix.Unlinkat(fd, name, 0); err == nil || errors.Is(err, unix.ENOENT) {
			err = unix.ENOENT
		}
	}
	if errors.Is(err, unix.ENOENT) {
		if err = unix.Mkdirat(fd, name, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
			sub, err = openNoFollow(fd, name, unix.O_RDONLY|unix.O_DIRECTORY)
		}
	}
	if err != nil {
		return -1, err
	}
	if err := unix.Fchmod(sub, 0o755); err != nil {
		unix.Close(sub)
		return -1, err
	}
	return sub, nil
}

func (x *extraction) dir(rootFD int, name string) error {
	fd, err := x.dirs(rootFD, name)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// file writes one regular file into an unnamed file in its directory
// (O_TMPFILE, where the file system has it), gives it a temporary name
// once whole and renames that over name. A call killed outright (a
// sandbox of its own is SIGKILLed at its deadline) leaves no partial
// file: an unnamed one goes with its last descriptor.
func (x *extraction) file(rootFD int, name string, content io.Reader) error {
	dir, base := splitDir(name)
	dirFD, err := x.last.open(dir, func() (int, error) { return x.dirs(rootFD, dir) })
	if err != nil {
		return err
	}
	tmp := fmt.Sprintf(".oma-extract-%016x", rand.Uint64())
	fd, err := unix.Openat(dirFD, ".", unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	unnamed := err == nil
	if !unnamed {
		fd, err = unix.Openat(dirFD, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return fmt.Errorf("cannot create %s below %s: %s", name, x.root, errText(err))
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = io.Copy(f, content)
	if err == nil {
		err = f.Chmod(x.mode(name))
	}
	named := !unnamed // tmp names this file, to be removed on failure
	if err == nil && unnamed {
		// The descriptor's magic link names the unnamed file, never a
		// path the guest could have swapped.
		err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), dirFD, tmp, unix.AT_SYMLINK_FOLLOW)
		named = err == nil
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirFD, tmp, dirFD, base)
	}
	if err != nil {
		if named {
			_ = unix.Unlinkat(dirFD, tmp, 0)
		}
		if x.c.ending() {
			return errCallEnding
		}
		return fmt.Errorf("cannot write %s below %s: %s", name, x.root, errText(err))
	}
	return nil
}

// mode is a file's mode: 444, or 555 for a skill file whose path has a
// scripts directory above it.
func (x *extraction) mode(name string) os.FileMode {
	if x.scripts && strings.Contains(x.root+"/"+name, "/scripts/") {
		return 0o555
	}
	return 0o444
}
