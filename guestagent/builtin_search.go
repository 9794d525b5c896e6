//go:build linux

package guestagent

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// The search builtins start find and rg themselves, each in a session of
// its own, tagged so that the search-kill builtin finds it.

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
// marker (see glob.EnumerationArgs). Its args: token, root, marker,
// skipgit, name, under.
func globEnumerate(c *builtinCall) int {
	if len(c.Args) != 6 {
		return c.badArgs(agentwire.BuiltinGlobEnumerate, 6)
	}
	token, root, marker, skipGit, name, under := c.Args[0], c.Args[1], c.Args[2], c.Args[3], c.Args[4], c.Args[5]
	// find visits "." first, so the marker it prints there precedes every
	// path and comes from the tagged work.
	argv := []string{".", "-path", ".", "-printf", marker + `\0`, "-o"}
	if skipGit == "1" {
		argv = append(argv, "-type", "d", "-name", ".git", "-prune", "-o")
	}
	argv = append(argv, "-type", "f")
	if name != "" {
		argv = append(argv, "-name", name)
	}
	if under != "" {
		argv = append(argv, "-path", "*/"+under+"/*")
	}
	argv = append(argv, "-print0")
	if c.ending() {
		return killedStatus
	}
	cmd := c.tagged(globOwnerEnv, token, "find", argv...)
	// The child enters root after it became the user, as a cd would; a
	// relative root is taken from the workdir it inherits.
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = c.Stdout, c.Stderr
	if err := c.start(cmd); err != nil {
		if c.canEnter(root) {
			return c.setsidFailed("find", err)
		}
		// No work was started: the marker, then the failure.
		if _, err := io.WriteString(c.Stdout, marker+"\x00"); err != nil {
			return 1
		}
		fmt.Fprintf(c.Stderr, "Path not found: %s\n", root)
		return 3
	}
	code, killed := c.wait(cmd)
	switch {
	case killed:
		return killedStatus
	case code <= 1:
		return 0 // 1: some directory could not be read; find said which
	}
	return code
}

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
	args := []string{"--no-config", "--hidden", "--no-ignore", "--color", "never", "--count", "--with-filename", "--null", "--no-mmap", "--sort", "path"}
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

// setsidFailed reports a program that could not be started as
// util-linux's setsid does: its words and strerror's, and status
// 127 when it was not found, else 126. (A busybox setsid words it
// otherwise; the status is the same.)
func (c *builtinCall) setsidFailed(name string, err error) int {
	errno, code := syscall.ENOENT, 127
	if !errors.Is(err, exec.ErrNotFound) && !errors.As(err, &errno) {
		errno = syscall.EACCES
	}
	if errno != syscall.ENOENT {
		code = 126
	}
	fmt.Fprintf(c.Stderr, "setsid: failed to execute %s: %s\n", name, errText(errno))
	return code
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

// canEnter tells whether the call's user could change into directory p.
func (c *builtinCall) canEnter(p string) bool {
	if p == "" {
		return true // bash's cd "" stays where it is
	}
	return asUser(c.User, func() error {
		var st unix.Stat_t
		if err := unix.Stat(c.userPath(p), &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return unix.ENOTDIR
		}
		return unix.Faccessat(unix.AT_FDCWD, c.userPath(p), unix.X_OK, unix.AT_EACCESS)
	}) == nil
}
