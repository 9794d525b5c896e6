//go:build linux

package guestagent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The file builtins do the guest side of the write, edit, read and ls
// tools (tools/write.go, tools/edit.go, tools/read.go, tools/ls.go), their
// messages and exit codes those of the tools' errors. Everything they do
// to a guest path happens inside asUser, through raw system calls on that
// thread.

// killedExit is what a builtin ended by its call's kill returns: the
// status a killed script gets.
const killedExit = 255

// ioChunk is how much one read of stdin or of a file takes.
const ioChunk = 64 << 10

// fileJob is one file builtin's state: what fail reports and undoes.
type fileJob struct {
	c    *builtinCall
	show string   // the path as the tool's caller gave it
	tmp  string   // the temp file made, removed on failure
	made []string // directories made, outermost first, removed on failure
}

// fail says msg on stderr, removes what the job made and returns code.
func (j *fileJob) fail(code int, msg string) int {
	_, _ = io.WriteString(j.c.Stderr, msg+"\n")
	j.undo()
	return code
}

// killed removes what the job made: the call is being ended.
func (j *fileJob) killed() int {
	j.undo()
	return killedExit
}

func (j *fileJob) undo() {
	if j.tmp != "" {
		_ = unix.Unlink(j.tmp)
		j.tmp = ""
	}
	for i := len(j.made) - 1; i >= 0; i-- {
		if unix.Rmdir(j.made[i]) != nil {
			break
		}
	}
	j.made = nil
}

// resolve gives f's final target (canon) or fails: unresolvable (3), or
// outside the workspace ws (10), a symbolic link being followed only
// where it stays inside.
func (j *fileJob) resolve(f, ws string) (string, int) {
	real, ok := canon(f)
	wsreal, wsok := canon(ws)
	if !ok || !wsok {
		return "", j.fail(3, "Cannot resolve "+j.show)
	}
	if real != wsreal && !strings.HasPrefix(real, wsreal+"/") {
		return "", j.fail(10, "Refusing "+j.show+": it is a symbolic link (or lies under one) that resolves to "+real+", outside "+ws+"; links are followed only inside the workspace")
	}
	return real, 0
}

// asCallUser runs the job body as the call's user; a thread that cannot
// take that identity fails the call.
func asCallUser(c *builtinCall, body func() int) int {
	code := 1
	if err := asUser(c.User, func() error { code = body(); return nil }); err != nil {
		_, _ = fmt.Fprintf(c.Stderr, "%v\n", err)
		return 1
	}
	return code
}

// builtinWrite replaces the final target of a path with stdin atomically
// (see tools/write.go writeFile): args path, original length (empty for a
// plain write), workspace, shown name; stdin the original bytes, when a
// length is given, then the new content. With an original, the rename
// happens only if the file still holds exactly those bytes (exit 9
// otherwise). A failure removes the temp file and the directories made.
func builtinWrite(c *builtinCall) int {
	if len(c.Args) != 4 {
		_, _ = fmt.Fprintf(c.Stderr, "write: want 4 arguments (path, original length, workspace, shown name), got %d\n", len(c.Args))
		return 2
	}
	j := &fileJob{c: c, show: c.Args[3]}
	return asCallUser(c, func() int { return j.write(c.Args[0], c.Args[1], c.Args[2]) })
}

func (j *fileJob) write(f, old, ws string) int {
	show := j.show
	real, code := j.resolve(f, ws)
	if code != 0 {
		return code
	}
	if isDir(real) {
		return j.fail(3, "Path is a directory: "+show)
	}
	var original []byte
	if old != "" {
		want, err := strconv.ParseInt(old, 10, 64)
		if err != nil || want < 0 {
			return j.fail(3, fmt.Sprintf("Cannot write %s: bad original length %q", show, old))
		}
		original, err = io.ReadAll(io.LimitReader(j.c.Stdin, want))
		switch {
		case j.c.ending():
			return j.killed()
		case err != nil:
			return j.fail(3, "Cannot write "+show+": "+errText(err))
		case int64(len(original)) < want:
			return j.fail(3, "Cannot write "+show+": input ended early")
		}
	}
	dir := real[:strings.LastIndexByte(real, '/')]
	if code := j.makeDirs(dir); code != 0 {
		return code
	}
	fd, code := j.makeTemp(dir)
	if code != 0 {
		return code
	}
	code = j.fill(fd, real)
	if err := unix.Close(fd); err != nil && code == 0 {
		code = j.fail(3, "Cannot write "+show+": "+errText(err))
	}
	if code != 0 {
		return code
	}
	if original != nil {
		lock, code := j.lockUnchanged(real, original)
		if code != 0 {
			return code
		}
		// Held over the rename: a writer waiting for it sees the new file.
		defer unix.Close(lock)
	}
	if err := unix.Rename(j.tmp, real); err != nil {
		return j.fail(3, "Cannot write "+show+": "+errText(err))
	}
	j.tmp, j.made = "", nil
	return 0
}

// makeDirs makes dir and its missing parents as mkdir -p would, keeping
// what it made for fail to remove.
func (j *fileJob) makeDirs(dir string) int {
	var missing []string
	for d := dir; d != "" && !exists(d) && !lexists(d); d = d[:strings.LastIndexByte(d, '/')] {
		missing = append([]string{d}, missing...)
	}
	if len(missing) == 0 && !isDir(dir) {
		missing = []string{dir}
	}
	for _, d := range missing {
		err := unix.Mkdir(d, 0o777)
		if err == nil {
			j.made = append(j.made, d)
			continue
		}
		// An existing directory will do; a name that cannot be looked up
		// (a link loop) is reported by why.
		if err == unix.EEXIST {
			if isDir(d) {
				continue
			}
			var st unix.Stat_t
			if serr := unix.Stat(d, &st); serr != nil {
				err = serr
			}
		}
		return j.fail(3, "Cannot create the directory of "+j.show+": "+errText(err))
	}
	return 0
}

// makeTemp creates a new .oma-write.XXXXXXXX file in dir, readable and
// writable by its owner only until fill gives it its mode.
func (j *fileJob) makeTemp(dir string) (int, int) {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	for {
		name := []byte(dir + "/.oma-write.")
		for range 8 {
			name = append(name, chars[rand.IntN(len(chars))])
		}
		fd, err := retryEINTR(func() (int, error) {
			return unix.Open(string(name), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		})
		if err == nil {
			j.tmp = string(name)
			return fd, 0
		}
		if err != unix.EEXIST {
			return -1, j.fail(3, "Cannot write "+j.show+": "+errText(err))
		}
	}
}

// fill copies the rest of stdin into the temp file fd, then gives it the
// mode of the file it replaces (644 for a new one).
func (j *fileJob) fill(fd int, real string) int {
	buf := make([]byte, ioChunk)
	for {
		n, err := j.c.Stdin.Read(buf)
		if j.c.ending() {
			return j.killed()
		}
		for off := 0; off < n; {
			w, werr := retryEINTR(func() (int, error) { return unix.Write(fd, buf[off:n]) })
			if werr != nil {
				return j.fail(3, "Cannot write "+j.show+": "+errText(werr))
			}
			off += w
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return j.fail(3, "Cannot write "+j.show+": "+errText(err))
		}
	}
	mode := uint32(0o644)
	var st unix.Stat_t
	if unix.Stat(real, &st) == nil {
		mode = st.Mode & 0o7777
	}
	_ = unix.Fchmod(fd, mode)
	return 0
}

// lockUnchanged takes the file's lock (flock, as flock(1) takes it) and
// checks, under it, that the file the name holds now
// has exactly the original bytes. It returns the lock's descriptor. Its
// opens are nonblocking, so a FIFO put in place of the file cannot stall
// them; the wait for the lock ends when the call is killed.
func (j *fileJob) lockUnchanged(real string, original []byte) (int, int) {
	changed := func() int { return j.fail(9, "file changed since it was read") }
	lock, err := openRead(real)
	if err != nil {
		return -1, changed()
	}
	if code := j.flock(lock); code != 0 {
		unix.Close(lock)
		return -1, code
	}
	// Compare the file the name holds now, not the one locked: a writer
	// that renamed over it while this waited for the lock has won.
	same := sameBytes(real, original)
	if !same {
		unix.Close(lock)
		return -1, changed()
	}
	return lock, 0
}

// flock waits for an exclusive lock on fd, polling so that the call's
// kill ends the wait. It goes on without the lock when the file cannot be
// locked at all.
func (j *fileJob) flock(fd int) int {
	wait := time.Millisecond
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			return 0
		}
		select {
		case <-j.c.Killed:
			return j.killed()
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// sameBytes says whether the regular file at path holds exactly want.
func sameBytes(path string, want []byte) bool {
	fd, err := openRead(path)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if !isRegularFD(fd) {
		return false
	}
	buf := make([]byte, ioChunk)
	at := 0
	for {
		n, err := retryEINTR(func() (int, error) { return unix.Read(fd, buf) })
		if err != nil || at+n > len(want) || !bytes.Equal(buf[:n], want[at:at+n]) {
			return false
		}
		if n == 0 {
			return at == len(want)
		}
		at += n
	}
}

// builtinCat prints the regular file a path resolves to, inside the
// workspace (the edit tool's read): args path, workspace, shown name.
func builtinCat(c *builtinCall) int {
	if len(c.Args) != 3 {
		_, _ = fmt.Fprintf(c.Stderr, "cat: want 3 arguments (path, workspace, shown name), got %d\n", len(c.Args))
		return 2
	}
	j := &fileJob{c: c, show: c.Args[2]}
	return asCallUser(c, func() int { return j.cat(c.Args[0], c.Args[1]) })
}

func (j *fileJob) cat(f, ws string) int {
	show := j.show
	real, code := j.resolve(f, ws)
	if code != 0 {
		return code
	}
	var st unix.Stat_t
	if unix.Stat(real, &st) != nil {
		return j.fail(3, "File not found: "+show)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return j.fail(3, "Not a regular file: "+show)
	}
	// Nonblocking, then checked: a FIFO swapped in after the stat cannot
	// stall the open or the reads.
	fd, err := openRead(real)
	if err != nil {
		return j.fail(3, "Cannot read "+show+": "+errText(err))
	}
	defer unix.Close(fd)
	if !isRegularFD(fd) {
		return j.fail(3, "Not a regular file: "+show)
	}
	buf := make([]byte, ioChunk)
	for {
		if j.c.ending() {
			return killedExit
		}
		n, err := retryEINTR(func() (int, error) { return unix.Read(fd, buf) })
		if err != nil {
			return j.fail(3, "Cannot read "+show+": "+errText(err))
		}
		if n == 0 {
			return 0
		}
		if _, err := j.c.Stdout.Write(buf[:n]); err != nil {
			return 1
		}
	}
}

// canon resolves path as readlink -m (gnulib's canonicalize in
// CAN_MISSING mode) does: a component that is no link (missing, under a
// file, unreadable) is kept as it is; after 20 links, a link met again
// with the same rest of the path under the same directory is a loop and is
// kept unresolved; a parent that cannot be looked up then fails the
// resolve. Unlike readlink, it gives up after 1000 links (the kernel gives
// up after 40): readlink -m follows a link whose target grows under itself
// (l -> l/x) for ever. A relative path is taken from the root.
func canon(path string) (string, bool) {
	rest, dest, links := path, "", 0
	seen := map[string]bool{}
	for {
		rest = strings.TrimLeft(rest, "/")
		if rest == "" {
			break
		}
		c, after := rest, ""
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			c, after = rest[:i], rest[i:]
		}
		switch c {
		case "..":
			if i := strings.LastIndexByte(dest, '/'); i >= 0 {
				dest = dest[:i]
			}
		case ".":
		default:
			to, ok := readlink(dest + "/" + c)
			if !ok {
				dest += "/" + c
				break
			}
			links++
			if links > 20 {
				var st unix.Stat_t
				if unix.Stat(dest+"/", &st) != nil {
					return "", false
				}
				key := fmt.Sprintf("%d %d %s", st.Dev, st.Ino, rest)
				if seen[key] {
					dest += "/" + c
					break
				}
				seen[key] = true
			}
			if links > 1000 {
				return "", false
			}
			rest = to + after
			if strings.HasPrefix(to, "/") {
				dest = ""
			}
			continue
		}
		rest = after
	}
	if dest == "" {
		return "/", true
	}
	return dest, true
}

// readlink is a link's target, false for anything that is no link or
// cannot be read.
func readlink(path string) (string, bool) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink(path, buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

// openRead opens path for reading, nonblocking. Where commands have a
// pid namespace of their own, the agent is their uid and /proc/self is the
// agent: a magic link there (/proc/self/fd/N) would reopen the agent's own
// pipes, other calls' output and input, which no command can name. No
// magic link is followed there (ELOOP).
func openRead(path string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC
	return retryEINTR(func() (int, error) {
		if commandsNS == nil {
			return unix.Open(path, flags, 0)
		}
		return unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_NO_MAGICLINKS})
	})
}

func isRegularFD(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

func exists(path string) bool {
	var st unix.Stat_t
	return unix.Stat(path, &st) == nil
}

func lexists(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil
}

func isDir(path string) bool {
	var st unix.Stat_t
	return unix.Stat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

func retryEINTR(fn func() (int, error)) (int, error) {
	for {
		n, err := fn()
		if err != unix.EINTR {
			return n, err
		}
	}
}

// errText is an error as coreutils say it (glibc's strerror): Go's text of an errno with its first letter capitalised.
func errText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s := errno.Error()
		switch {
		case errno == unix.EHWPOISON: // past the end of Go's table
			s = "memory page has hardware error"
		case strings.HasPrefix(s, "errno "):
			return "Unknown error " + strconv.Itoa(int(errno))
		}
		return strings.ToUpper(s[:1]) + s[1:]
	}
	return err.Error()
}
