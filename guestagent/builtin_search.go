//go:build linux

package guestagent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// grep's builtin starts rg itself, in a session of its own, tagged so that
// the search-kill builtin finds it; glob's walks the tree in the agent.

// The tags of their processes: glob.OwnerEnv and grep.OwnerEnv, spelled
// here because importing those packages would bring their token maker's
// uuid, crypto and net into the agent (about 270 KiB). The tests hold them equal.
const (
	globOwnerEnv = "OMA_GLOB_OWNER"
	grepOwnerEnv = "OMA_GREP_OWNER"
)

// killedStatus is what a call killed before its work ended answers, as a
// shell killed by SIGKILL does.
const killedStatus = 255

// globEnumerate lists the regular files under root after the readiness
// marker (see glob.EnumerationArgs), walking the tree itself as the call's
// user: no process is started, so there is nothing for search-kill to
// find, and a kill or the timer ends the walk between two directories.
// Its args: token, root, marker, skipgit, name, under.
func globEnumerate(c *builtinCall) int {
	if len(c.Args) != 6 {
		return c.badArgs(agentwire.BuiltinGlobEnumerate, 6)
	}
	root, marker := c.Args[1], c.Args[2]
	w := &globWalk{c: c, skipGit: c.Args[3] == "1", name: c.Args[4], path: []byte(".")}
	if under := c.Args[5]; under != "" {
		w.under = []byte("/" + under + "/")
	}
	if c.ending() {
		return killedStatus
	}
	return asCallUser(c, func() int {
		// The root is entered as cd would, a link at it followed; below it
		// none is.
		fd, err := retryEINTR(func() (int, error) {
			return unix.Open(c.userPath(root), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		})
		if err == nil && !searchable(fd) {
			unix.Close(fd)
			err = unix.EACCES
		}
		w.out = bufio.NewWriterSize(c.Stdout, ioChunk)
		if _, werr := io.WriteString(w.out, marker+"\x00"); werr != nil {
			return killedStatus
		}
		if err != nil {
			if w.out.Flush() != nil {
				return killedStatus
			}
			fmt.Fprintf(c.Stderr, "Path not found: %s\n", root)
			return 3
		}
		// The marker goes out at once: the host waits for it.
		if w.out.Flush() != nil {
			return killedStatus
		}
		unix.Close(w.dir(fd, 1)) // the root is never reopened (see descend)
		if w.failed || w.out.Flush() != nil || c.ending() {
			return killedStatus
		}
		return 0
	})
}

// globWalk is one glob-enumerate walk: find . [-type d -name .git -prune]
// -type f [-name NAME] [-path */UNDER/*] -print0, in find's order (each
// directory's entries as it lists them, a directory's insides right after
// it), with find's complaint on stderr for a directory it cannot read.
type globWalk struct {
	c       *builtinCall
	out     *bufio.Writer
	skipGit bool
	name    string // a base name pattern of literal bytes and '*'
	under   []byte // "/UNDER/", or nil
	failed  bool   // output could not be written: the call is ending
	// path is the path of the entry being looked at, one buffer for the
	// whole walk: a path kept per level would hold memory in the square of
	// a deep tree's depth.
	path []byte
}

func (w *globWalk) complain(path string, err error) {
	fmt.Fprintf(w.c.Stderr, "find: %s: %s\n", quoter{}.quote(path), errText(err))
}

// dir lists the directory fd, whose path w.path holds ("." for the root)
// and depth its number of components, and returns the descriptor of that
// directory it ends with, or -1 when it lost its place (see descend).
func (w *globWalk) dir(fd int, depth int) int {
	n := len(w.path) // w.path[:n] is this directory's path
	entries, err := readDirEntries(fd, w.c.Killed)
	if err != nil {
		w.complain(string(w.path[:n]), err)
	}
	for _, e := range entries {
		if w.failed || w.c.ending() {
			return fd
		}
		w.path = append(append(w.path[:n], '/'), e.name...)
		typ := e.typ
		if typ == unix.DT_UNKNOWN {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if !errors.Is(err, unix.ENOENT) {
					w.complain(string(w.path), err)
				}
				continue
			}
			typ = dirType(st.Mode)
		}
		switch typ {
		case unix.DT_REG:
			if w.matches(e.name) {
				_, err := w.out.Write(append(w.path, 0))
				w.failed = err != nil
			}
		case unix.DT_DIR:
			if w.skipGit && e.name == ".git" {
				continue
			}
			sub, err := openNoFollow(fd, e.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK)
			switch {
			case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
				// gone or replaced while walked
			case err != nil:
				w.complain(string(w.path), err)
			default:
				if fd, err = descend(fd, sub, depth, func(sub int) int { return w.dir(sub, depth+1) }); err != nil {
					if !errors.Is(err, errLost) {
						w.complain(string(w.path[:n]), err)
					}
					return -1
				}
			}
		}
	}
	return fd
}

// matches applies the narrowings to a regular file's base name and its
// path, w.path.
func (w *globWalk) matches(base string) bool {
	return (w.name == "" || starMatch(w.name, base)) && (w.under == nil || bytes.Contains(w.path, w.under))
}

// starMatch matches s against a pattern whose only special byte is '*'
// (any run of bytes), as fnmatch does for such a pattern.
func starMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, part := range parts[1 : len(parts)-1] {
		i := strings.Index(s, part)
		if i < 0 {
			return false
		}
		s = s[i+len(part):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// dirType is the getdents type of a stat mode.
func dirType(mode uint32) uint8 {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFDIR:
		return unix.DT_DIR
	}
	return unix.DT_UNKNOWN
}

// rgSearchFlags are rg's flags for grep's search: one record (path, NUL,
// count, newline) per matching file, hidden and ignored files searched,
// in path order (grep's docs; the preflight proves the guest's rg does so).
var rgSearchFlags = []string{"--no-config", "--hidden", "--no-ignore", "--color", "never", "--count", "--with-filename", "--null", "--no-mmap", "--sort", "path"}

// grepSearch lists the files under root whose contents match pattern,
// after the readiness marker (see grep.SearchArgs). Its args: token, root,
// pattern, glob, marker.
func grepSearch(c *builtinCall) int {
	if len(c.Args) != 5 {
		return c.badArgs(agentwire.BuiltinGrepSearch, 5)
	}
	token, root, pattern, rgGlob, marker := c.Args[0], c.Args[1], c.Args[2], c.Args[3], c.Args[4]
	out := &heldWriter{w: c.Stdout, open: make(chan struct{})}
	// ready sends the marker once the call's first tagged process has been
	// started (or could not be): until then rg's output is held back.
	ready := func() bool {
		_, err := io.WriteString(c.Stdout, marker+"\x00")
		out.release(err)
		return err == nil
	}
	if c.ending() {
		return killedStatus
	}
	// rg reads a file named on its command line whole, NUL or not: a root
	// that is a regular file holding a NUL is not searched.
	if c.isRegular(root) {
		check := c.tagged(grepOwnerEnv, token, "rg", "--no-config", "-qa", "--", `\x00`, root)
		err := c.start(check)
		if !ready() {
			return c.abandon(check, err == nil)
		}
		if err == nil {
			code, killed := c.wait(check)
			switch {
			case killed:
				return killedStatus
			case code == 0:
				return 0
			}
		}
		if c.ending() {
			return killedStatus
		}
	}
	args := slices.Clip(rgSearchFlags)
	if rgGlob != "" {
		args = append(args, "--glob", rgGlob)
	}
	args = append(args, "--", pattern, root)
	search := c.tagged(grepOwnerEnv, token, "rg", args...)
	search.Stdout, search.Stderr = out, c.Stderr
	err := c.start(search)
	if !out.released() && !ready() {
		return c.abandon(search, err == nil)
	}
	if err != nil {
		return c.startFailed("rg", err)
	}
	code, killed := c.wait(search)
	switch {
	case killed:
		return killedStatus
	case code <= 1:
		return 0
	case code == 2 && c.exists(root) && c.validPattern(pattern):
		// Some files could not be read or vanished; rg said which.
		return 0
	}
	return code
}

// validPattern runs rg on /dev/null to tell an invalid pattern (status 2) from files that could not be searched.
func (c *builtinCall) validPattern(pattern string) bool {
	if c.ending() {
		return false
	}
	cmd := exec.Command("rg", "--no-config", "-q", "--", pattern, "/dev/null")
	cmd.Env = append(slices.Clip(c.Env), "LC_ALL=C")
	cmd.SysProcAttr = c.ProcAttr(true)
	if c.start(cmd) != nil {
		return false
	}
	code, killed := c.wait(cmd)
	return !killed && code <= 1
}

// heldWriter holds back every write until release: rg's output must not
// precede the marker the agent writes once rg has started.
type heldWriter struct {
	w    io.Writer
	open chan struct{}
	err  error // set before open closes: the marker could not be sent
}

func (h *heldWriter) release(err error) {
	h.err = err
	close(h.open)
}

func (h *heldWriter) released() bool {
	select {
	case <-h.open:
		return true
	default:
		return false
	}
}

func (h *heldWriter) Write(b []byte) (int, error) {
	<-h.open
	if h.err != nil {
		return 0, h.err
	}
	return h.w.Write(b)
}

// tagged returns the command `envName=token LC_ALL=C setsid name args...`
// would start: its own session, the call's user, the ownership tag in its
// environment.
func (c *builtinCall) tagged(envName, token, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(slices.Clip(c.Env), envName+"="+token, "LC_ALL=C")
	cmd.SysProcAttr = c.ProcAttr(true)
	return cmd
}

// waitDelay bounds how long a process's exit waits for the copying of its
// output, should something else hold its pipes.
const waitDelay = time.Second

// start starts cmd where a call's processes start (see startIn).
func (c *builtinCall) start(cmd *exec.Cmd) error {
	cmd.WaitDelay = waitDelay
	return startIn(cmd, c.Workdir, nil)
}

// wait waits for cmd to end and returns its status as a shell reports it
// (128+N for a death by signal N). When the call ends first, it kills
// cmd's tree and reports killed.
func (c *builtinCall) wait(cmd *exec.Cmd) (code int, killed bool) {
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-c.Killed:
		select {
		case <-done:
		default:
			killTree(cmd.Process, cmd.Process.Pid)
			<-done
			killed = true
		}
	}
	if cmd.ProcessState == nil {
		return killedStatus, killed // not waited for: reaped elsewhere
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), killed
	}
	return ws.ExitStatus(), killed
}

// abandon ends a call whose marker could not be sent (it is ending): what
// it started is killed, and the status is a shell's for a failed printf.
func (c *builtinCall) abandon(cmd *exec.Cmd, started bool) int {
	if started {
		killTree(cmd.Process, cmd.Process.Pid)
		c.wait(cmd)
	}
	return 0
}

// startFailed reports a program that could not be started, with a shell's
// status for it: 127 when it was not found, else 126.
func (c *builtinCall) startFailed(name string, err error) int {
	fmt.Fprintf(c.Stderr, "%s: %v\n", name, err)
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, syscall.ENOENT) {
		return 127
	}
	return 126
}

func (c *builtinCall) badArgs(name string, want int) int {
	fmt.Fprintf(c.Stderr, "%s: %d arguments, want %d\n", name, len(c.Args), want)
	return 2
}

// isRegular is `[ -f PATH ]`, as the call's user.
func (c *builtinCall) isRegular(p string) bool {
	var st unix.Stat_t
	err := asUser(c.User, func() error { return unix.Stat(c.userPath(p), &st) })
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

// exists is `[ -e PATH ]`, as the call's user.
func (c *builtinCall) exists(p string) bool {
	var st unix.Stat_t
	return asUser(c.User, func() error { return unix.Stat(c.userPath(p), &st) }) == nil
}
