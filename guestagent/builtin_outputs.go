//go:build linux

package guestagent

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// The outputs builtins are the guest side of transfer.Collect: a listing of
// the outputs root under the collection's policy, then a tar stream of the
// files the host accepted. Both run as the call's user and follow no
// symbolic link anywhere below the root, so what they report is what is
// there, never what a link points to. The host trusts neither: it parses
// the listing strictly and checks every archive entry against it.

// maxPathBytes is the longest output path the listing names (outputs'
// MaxPathBytes): a longer one is only counted.
const maxPathBytes = 4096

// maxListDepth is how deep the listing descends: every path below a
// directory this deep is longer than maxPathBytes, so such a directory is
// counted as one unnamed entry instead of walked (holding a descriptor per
// level).
const maxListDepth = maxPathBytes / 2

// outputsList lists every non-directory entry under the outputs root in
// byte order and classifies each as outputs.ParseListing will: an unsafe
// name, a type other than a regular file, a hard link, a denied path, a
// limit. Only the entries that pass are hashed (at most their size and one
// byte), so an oversized or hostile tree costs no hashing. A directory the
// user cannot read or enter is listed as such. Its args: root, max files,
// max file bytes, max bytes, max named refusals, the number of denied
// names, the denied names, then the allowed paths. Its output: the number
// of unnamed refusals, then per entry path, type (find's %y letter), link
// count, size and sha256 (empty for a refused entry), each NUL-ended.
func outputsList(c *builtinCall) int {
	const fixed = 6
	if len(c.Args) < fixed {
		return c.badArgs(agentwire.BuiltinOutputsList, fixed)
	}
	l := listing{c: c, deny: map[string]bool{}}
	nums := make([]int64, 5)
	for i := range nums {
		n, err := strconv.ParseInt(c.Args[1+i], 10, 64)
		if err != nil || n < 0 {
			fmt.Fprintf(c.Stderr, "%s: argument %d is not a count: %q\n", agentwire.BuiltinOutputsList, 2+i, c.Args[1+i])
			return 2
		}
		nums[i] = n
	}
	l.maxFiles, l.maxFileBytes, l.maxBytes, l.maxNamed = int(nums[0]), nums[1], nums[2], int(nums[3])
	ndeny := int(nums[4])
	if ndeny > len(c.Args)-fixed {
		fmt.Fprintf(c.Stderr, "%s: %d denied names announced, %d arguments left\n", agentwire.BuiltinOutputsList, ndeny, len(c.Args)-fixed)
		return 2
	}
	for _, name := range c.Args[fixed : fixed+ndeny] {
		l.deny[name] = true
	}
	l.allow = c.Args[fixed+ndeny:]
	return asCallUser(c, func() int { return l.run(c.userPath(c.Args[0])) })
}

type listing struct {
	c                      *builtinCall
	maxFiles, maxNamed     int
	maxFileBytes, maxBytes int64
	deny                   map[string]bool
	allow                  []string
	entries                []listedEntry
	deep                   int // entries too deep to walk or name, each counted as one unnamed entry
	// path is the walk's path of the entry being looked at, one buffer
	// for the whole walk: a path kept per level would hold memory in the
	// square of a deep tree's depth.
	path []byte
}

type listedEntry struct {
	path  string
	typ   byte
	links uint64
	size  int64
	fetch bool   // passes the policy: to be hashed
	sum   string // its sha256, once hashed
}

func (l *listing) fail(msg string) int {
	fmt.Fprintf(l.c.Stderr, "session output listing failed: %s\n", msg)
	return 1
}

func (l *listing) run(root string) int {
	fd, err := openNoFollow(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY)
	var st unix.Stat_t
	switch {
	case errors.Is(err, unix.ENOENT):
		_, err = io.WriteString(l.c.Stdout, "0\x00")
		return sentStatus(err)
	case err != nil && unix.Lstat(root, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return l.fail("outputs root is a symlink")
	case err != nil:
		return l.fail("cannot enter outputs root: " + errText(err))
	}
	defer unix.Close(fd)
	_, err = l.walk(fd, 1) // the root is never reopened (see descend)
	if l.c.ending() {
		return killedExit
	}
	if err != nil {
		return l.fail("cannot enumerate outputs: " + err.Error())
	}
	slices.SortFunc(l.entries, func(a, b listedEntry) int { return strings.Compare(a.path, b.path) })
	keep, unnamed := l.classify()
	l.hash(fd, keep)
	if l.c.ending() {
		return killedExit
	}
	w := bufio.NewWriterSize(l.c.Stdout, ioChunk)
	fmt.Fprintf(w, "%d\x00", unnamed)
	for _, e := range keep {
		fmt.Fprintf(w, "%s\x00%c\x00%d\x00%d\x00%s\x00", e.path, e.typ, e.links, e.size, e.sum)
	}
	return sentStatus(w.Flush())
}

// sentStatus is a builtin's status once its output is written: a write
// fails only when the call is ending.
func sentStatus(err error) int {
	if err != nil {
		return killedExit
	}
	return 0
}

// walk adds the entries below the directory fd, whose path l.path holds
// (with a trailing "/", or "" for the root) and depth its number of
// components plus one, and returns the descriptor of that directory it
// ends with (see descend). An entry that vanishes while it is walked is
// left out, as if the walk had come a moment later.
func (l *listing) walk(fd int, depth int) (int, error) {
	n := len(l.path) // l.path[:n] is this directory's prefix
	entries, err := readDirEntries(fd, l.c.Killed)
	if err != nil {
		return fd, fmt.Errorf("%s: %s", strings.TrimSuffix(string(l.path[:n]), "/"), errText(err))
	}
	for _, e := range entries {
		name := e.name
		if l.c.ending() {
			return fd, nil
		}
		l.path = append(l.path[:n], name...)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fd, fmt.Errorf("%s: %s", l.path, errText(err))
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			l.add(listedEntry{typ: fileTypeLetter(st.Mode), links: uint64(st.Nlink), size: st.Size})
			continue
		}
		if depth >= maxListDepth {
			l.deep++
			continue
		}
		if fd, err = l.subdir(fd, name, depth); err != nil {
			return fd, err
		}
	}
	return fd, nil
}

// add lists e at l.path; a path too long to be named (classify) is only
// counted, not kept.
func (l *listing) add(e listedEntry) {
	if len(l.path) > maxPathBytes {
		l.deep++
		return
	}
	e.path = string(l.path)
	l.entries = append(l.entries, e)
}

// subdir walks the directory name in fd, whose path l.path holds, or
// lists it as one the user cannot read or enter, and returns fd's
// descriptor to go on with.
func (l *listing) subdir(fd int, name string, depth int) (int, error) {
	sub, err := openNoFollow(fd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
		return fd, nil // replaced while walked
	case errors.Is(err, unix.EACCES):
		l.add(listedEntry{typ: 'd', links: 1})
		return fd, nil
	case err != nil:
		return fd, fmt.Errorf("%s: %s", l.path, errText(err))
	}
	if !searchable(sub) {
		unix.Close(sub)
		l.add(listedEntry{typ: 'd', links: 1})
		return fd, nil
	}
	var walkErr error
	n := len(l.path)
	fd, err = descend(fd, sub, depth, func(sub int) int {
		l.path = append(l.path, '/')
		sub, walkErr = l.walk(sub, depth+1)
		return sub
	})
	l.path = l.path[:n]
	if walkErr != nil {
		return fd, walkErr
	}
	if err != nil {
		return fd, fmt.Errorf("%s: %s", l.path, errText(err))
	}
	return fd, nil
}

// searchable reports whether the user may look names up in the directory
// fd: resolving "." in it takes that right, as every name would.
func searchable(fd int) bool {
	var st unix.Stat_t
	return unix.Fstatat(fd, ".", &st, 0) == nil
}

// classify keeps, in order, the entries the host is told about: those it
// will fetch and the first maxNamed refusals. It returns them with the
// number of refusals not named. Once no more files fit and no more
// refusals may be named, the rest is counted without being looked at.
func (l *listing) classify() ([]listedEntry, int) {
	var keep []listedEntry
	unnamed := l.deep
	files, named := 0, 0
	var total int64
	for i, e := range l.entries {
		if files >= l.maxFiles && named >= l.maxNamed {
			unnamed += len(l.entries) - i
			break
		}
		ok := plainName(e.path) && len(e.path) <= maxPathBytes && e.typ == 'f' && e.links == 1 &&
			!l.denied(e.path) &&
			e.size <= l.maxFileBytes && files < l.maxFiles && e.size <= l.maxBytes-total
		switch {
		case ok:
			files++
			total += e.size
			e.fetch = true
		case named >= l.maxNamed || len(e.path) > maxPathBytes:
			unnamed++
			continue
		default:
			named++
		}
		keep = append(keep, e)
	}
	return keep, unnamed
}

// plainName reports that a path holds no control character and no
// backslash, which the host refuses in a name.
func plainName(p string) bool {
	for i := 0; i < len(p); i++ {
		if b := p[i]; b < 0x20 || b == 0x7f || b == '\\' {
			return false
		}
	}
	return true
}

// denied applies the outputs deny list: a path is denied when one of its
// components is a denied name (ASCII case folded), unless it is an allowed
// path or lies below one.
func (l *listing) denied(p string) bool {
	for _, a := range l.allow {
		if p == a || strings.HasPrefix(p, a+"/") {
			return false
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if l.deny[asciiLower(seg)] {
			return true
		}
	}
	return false
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// hash fills in the sha256 of each entry to be fetched, read through no
// link and no further than its listed size and one byte (a file that grew
// is caught by the fetch). One that can no longer be read as a regular file
// is left without a sum, which the host refuses.
func (l *listing) hash(rootFD int, entries []listedEntry) {
	for i := range entries {
		e := &entries[i]
		if !e.fetch {
			continue
		}
		if l.c.ending() {
			return
		}
		f, err := openBeneath(rootFD, e.path)
		if err != nil {
			continue
		}
		h := sha256.New()
		_, err = io.Copy(h, io.LimitReader(f, e.size+1))
		f.Close()
		if err == nil {
			e.sum = hex.EncodeToString(h.Sum(nil))
		}
	}
}

// outputsFetch writes the files named on stdin (NUL-ended paths relative
// to the outputs root) to stdout as one tar archive, in the order named,
// reading through no symbolic link: an entry replaced since it was listed
// arrives as what it is now (a link, a directory, a hard link to a file
// already sent, other bytes), one that is gone does not arrive, and the
// host refuses either. A file's size is taken when it is opened; one that
// shrinks while read is padded with zeros, so its digest tells. Its arg:
// the outputs root.
func outputsFetch(c *builtinCall) int {
	if len(c.Args) != 1 {
		return c.badArgs(agentwire.BuiltinOutputsFetch, 1)
	}
	return asCallUser(c, func() int {
		rootFD, err := openNoFollow(unix.AT_FDCWD, c.userPath(c.Args[0]), unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			fmt.Fprintf(c.Stderr, "cannot enter outputs root %s: %s\n", c.Args[0], errText(err))
			return 1
		}
		defer unix.Close(rootFD)
		out := bufio.NewWriterSize(c.Stdout, ioChunk)
		f := fetch{c: c, root: rootFD, tw: tar.NewWriter(out), sent: map[[2]uint64]string{}}
		names := bufio.NewReader(c.Stdin)
		for {
			name, err := names.ReadString(0)
			if errors.Is(err, io.EOF) && name == "" {
				break
			}
			if err != nil {
				fmt.Fprintf(c.Stderr, "%s: a path on stdin does not end with NUL\n", agentwire.BuiltinOutputsFetch)
				return 2
			}
			if c.ending() {
				return killedExit
			}
			if err := f.entry(strings.TrimSuffix(name, "\x00")); err != nil {
				if c.ending() || errors.Is(err, errCallEnding) {
					return killedExit
				}
				fmt.Fprintf(c.Stderr, "%s: %v\n", agentwire.BuiltinOutputsFetch, err)
				return 1
			}
		}
		if f.tw.Close() != nil || out.Flush() != nil {
			return killedExit
		}
		return 0
	})
}

type fetch struct {
	c    *builtinCall
	root int
	tw   *tar.Writer
	sent map[[2]uint64]string // device and inode of the files sent with more than one link
}

// entry adds one path to the archive as it now is.
func (f *fetch) entry(name string) error {
	if !localPath(name) {
		return fmt.Errorf("%q is not a plain relative path", name)
	}
	dir, base := splitDir(name)
	dirFD, err := openDirBeneath(f.root, dir)
	if err != nil {
		return nil // gone, or no longer below the root without a link
	}
	defer unix.Close(dirFD)
	var st unix.Stat_t
	if unix.Fstatat(dirFD, base, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return nil
	}
	h := &tar.Header{Name: name, Mode: int64(st.Mode & 0o7777), ModTime: time.Unix(st.Mtim.Unix())}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return f.file(dirFD, base, h)
	case unix.S_IFLNK:
		target, err := readlinkat(dirFD, base)
		if err != nil {
			return nil
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
	case unix.S_IFDIR:
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case unix.S_IFIFO:
		h.Typeflag = tar.TypeFifo
	case unix.S_IFCHR:
		h.Typeflag = tar.TypeChar
	case unix.S_IFBLK:
		h.Typeflag = tar.TypeBlock
	default:
		return nil // a socket: tar has no entry for one
	}
	return f.tw.WriteHeader(h)
}

// file adds a regular file: as a hard link to a name already sent when it
// is that same file, else with its bytes.
func (f *fetch) file(dirFD int, base string, h *tar.Header) error {
	fd, err := openNoFollow(dirFD, base, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil
	}
	file := os.NewFile(uintptr(fd), h.Name)
	defer file.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	id := [2]uint64{uint64(st.Dev), st.Ino}
	if st.Nlink > 1 {
		if first, ok := f.sent[id]; ok {
			h.Typeflag, h.Linkname = tar.TypeLink, first
			return f.tw.WriteHeader(h)
		}
		f.sent[id] = h.Name
	}
	h.Typeflag, h.Size = tar.TypeReg, st.Size
	if err := f.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(f.tw, io.LimitReader(file, st.Size))
	if errors.Is(err, errCallEnding) {
		return err
	}
	// Shrunk or unreadable since it was opened: zeros keep the archive
	// whole, and the digest refuses the file.
	_, err = io.CopyN(f.tw, zeros{}, st.Size-n)
	return err
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// localPath reports that p is a relative path of plain components: none
// empty, "." or "..".
func localPath(p string) bool {
	if p == "" {
		return false
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// splitDir splits a local path into its directory ("" for none) and base.
func splitDir(p string) (string, string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

// openNoFollow opens name in dirFD with flags, not following a symbolic
// link at name itself.
func openNoFollow(dirFD int, name string, flags int) (int, error) {
	return retryEINTR(func() (int, error) {
		return unix.Openat(dirFD, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
}

// openDirBeneath opens the directory at the local path dir below rootFD
// ("" is rootFD itself, duplicated), one component at a time, following no
// symbolic link.
func openDirBeneath(rootFD int, dir string) (int, error) {
	return walkBeneath(rootFD, dir, func(fd int, seg string) (int, error) {
		return openNoFollow(fd, seg, unix.O_PATH|unix.O_DIRECTORY)
	})
}

// walkBeneath opens the directory at the local path dir below rootFD ("" is
// rootFD itself, duplicated) by step, which opens one component in its
// parent's descriptor.
func walkBeneath(rootFD int, dir string, step func(fd int, seg string) (int, error)) (int, error) {
	fd, err := unix.Dup(rootFD)
	if err != nil || dir == "" {
		return fd, err
	}
	unix.CloseOnExec(fd)
	for seg := range strings.SplitSeq(dir, "/") {
		next, err := step(fd, seg)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// heldLevels is how many directory levels a walk keeps open. Deeper, a
// walk closes a directory before it enters a subdirectory and comes back
// through "..", so a tree of any depth costs it no more descriptors than
// this: a guest cannot make a walk fail at its open-file limit.
var heldLevels = 64

// errMoved is a directory moved while walked below heldLevels: ".." no
// longer leads to the directory the walk left, so it cannot go on there.
// errLost is its echo in the directories above, up to one still held:
// the walk lost its place below them, which was reported there.
var (
	errMoved = errors.New("moved while walked")
	errLost  = errors.New("lost its place below")
)

// descend walks sub, a subdirectory opened in fd depth levels below the
// walk's root, by walk, which returns the descriptor of sub it ends with
// (-1 when it lost its place below, which it reports), and returns the
// descriptor of fd's directory to go on with: fd itself, or below
// heldLevels fd reopened from sub through "..", checked to be the
// directory it left (else errMoved, or errLost when walk lost its place,
// and -1: the walk cannot go on here).
func descend(fd, sub, depth int, walk func(sub int) int) (int, error) {
	if depth < heldLevels {
		if sub = walk(sub); sub >= 0 {
			unix.Close(sub)
		}
		return fd, nil
	}
	var left unix.Stat_t
	if err := unix.Fstat(fd, &left); err != nil {
		unix.Close(sub)
		return fd, err
	}
	unix.Close(fd)
	if sub = walk(sub); sub < 0 {
		return -1, errLost
	}
	back, err := openNoFollow(sub, "..", unix.O_RDONLY|unix.O_DIRECTORY)
	unix.Close(sub)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(back, &st); err != nil || st.Dev != left.Dev || st.Ino != left.Ino {
		unix.Close(back)
		return -1, errMoved
	}
	return back, nil
}

// openBeneath opens the regular file at the local path p below rootFD for
// reading, following no symbolic link on the way.
func openBeneath(rootFD int, p string) (*os.File, error) {
	dir, base := splitDir(p)
	dirFD, err := openDirBeneath(rootFD, dir)
	if err != nil {
		return nil, err
	}
	fd, err := openNoFollow(dirFD, base, unix.O_RDONLY|unix.O_NONBLOCK)
	unix.Close(dirFD)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// readlinkat reads the target of the link name in dirFD.
func readlinkat(dirFD int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirFD, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
