package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// platform is what one host OS contributes to a session.
type platform interface {
	// paths are where the session's directories appear to commands.
	paths(d hostDirs) session.Paths
	// prepare sets ownership and modes of a new session's directories.
	prepare(d hostDirs) error
	// owner is who should own a file CopyIn writes at host path p.
	owner(d hostDirs, p string) (uid, gid int, ok bool)
	// launch prepares the host process of one call.
	launch(c call) (*launched, error)
}

// call is one command as the platform needs it.
type call struct {
	name    string
	dirs    hostDirs
	policy  Policy
	limits  Limits
	env     []string
	workdir string // as commands name it; physically inside the workspace
	root    bool
	argv    []string
	// agent is the host path of the guest agent, bound at agentGuestPath
	// when argv runs one of its builtins ([agent, "builtin", NAME, ARGS...]);
	// "" otherwise.
	agent string
	// refused, when set, is told of each refusal of the call's egress
	// proxy.
	refused func(*egress.RefusedError)
}

// launched is a call's prepared host process.
type launched struct {
	cmd    *exec.Cmd
	marker bool
	// start, when set, starts cmd in place of cmd.Start (see runSpec).
	start func(*exec.Cmd) (release func(), err error)
	// finish runs once the process tree is gone: it removes the call's
	// resources and returns notes for the caller (e.g. limits that fired).
	finish func() []string
}

// Shell runs `/bin/bash -c SCRIPT bash ARGS...`, or, when the command
// names a builtin, the guest agent's builtin: as a
// call to the agent in the session's resident sandbox where one applies,
// else in a fresh sandbox over the session's directories (the builtin as
// `agent builtin NAME ARGS...`). A non-zero exit is in Result.ExitCode. A call
// without a GuestTimeout is bounded by the session's operation timeout
// (ErrHostTimeout when it fires). A timeout,
// cancellation or output overflow kills the whole tree and returns the
// output captured so far with ExitCode 137 and the matching error.
//
// A session removed by another process (session rm, the reaper) while a
// call runs, or before one starts, fails it with ErrGone: its sandbox was
// ended under it, and no other is started over a box being removed.
func (s *Session) Shell(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	res, err := s.shell(ctx, cmd, opts)
	if err != nil && !errors.Is(err, session.ErrGone) && !errors.Is(err, session.ErrClosed) && s.removedElsewhere() {
		return res, s.gone()
	}
	return res, err
}

func (s *Session) shell(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	cctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	release, err := s.wake(cctx)
	if err != nil {
		return nil, err
	}
	defer release()
	// One removed already has no workspace, which workdir finds.
	if s.removing() {
		return nil, s.gone()
	}
	if opts.GuestTimeout <= 0 {
		// Every guest operation has a deadline: the operation timeout, as
		// a host deadline, for calls that name none (glob, grep, outputs).
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, s.opTimeout())
		defer cancel()
	}
	root, err := s.user(opts.User)
	if err != nil {
		return nil, err
	}
	workdir, err := s.workdir(opts.Workdir)
	if err != nil {
		return nil, err
	}
	if cctx.Err() != nil {
		return nil, ctxError(cctx)
	}
	limits := s.limits()
	c := call{
		name: s.rec.Name, dirs: s.dirs, policy: s.rec.Policy, limits: limits, env: s.env,
		workdir: workdir, root: root, refused: s.countRefusal,
		argv: append([]string{"/bin/bash", "-c", cmd.Script, "bash"}, cmd.Args...),
	}
	maxOutput := minPositive(opts.MaxOutput, limits.OutputBytes, DefaultMaxOutput)
	guestTimeout := minPositive(opts.GuestTimeout, limits.WallTime)
	cur, err := s.residentSandbox(cctx, c)
	if err != nil {
		return nil, err
	}
	if cur != nil {
		defer s.res.leave()
	}
	// A resident sandbox another process started may run an older agent;
	// a builtin it lacks runs in a sandbox of its own, with this program's.
	if cur != nil && (cmd.Builtin == "" || cur.conn.Offers(cmd.Builtin)) {
		s.emit(AuditStarted, nil)
		res, err := s.runResident(cctx, cur, c, cmd, opts, guestTimeout, maxOutput)
		s.emit(AuditCompleted, res)
		return res, wallTimeError(limits, opts, err)
	}
	if cmd.Builtin != "" {
		if c.agent, err = s.agent.hostPath(); err != nil {
			return nil, err
		}
		c.argv = append([]string{agentGuestPath, "builtin", cmd.Builtin}, cmd.Args...)
	}
	l, err := s.plat.launch(c)
	if err != nil {
		return nil, err
	}
	s.served.count(cmd.Builtin, false)
	s.emit(AuditStarted, nil)
	res, err := run(cctx, runSpec{
		cmd: l.cmd, marker: l.marker, start: l.start, stdin: opts.Stdin, stdout: opts.Stdout, stderr: opts.Stderr,
		maxOutput:    maxOutput,
		guestTimeout: guestTimeout,
	})
	if notes := l.finish(); res != nil {
		res.Stderr = addNotes(res.Stderr, opts, notes)
	}
	s.emit(AuditCompleted, res)
	return res, wallTimeError(limits, opts, err)
}

// addNotes adds a line for each note (a limit that fired, a destination
// the proxy refused) to a call's stderr, or streams it, and returns the
// stderr.
func addNotes(stderr []byte, opts session.ShellOptions, notes []string) []byte {
	for _, n := range notes {
		line := []byte("oma-sandbox: " + n + "\n")
		if opts.Stderr != nil {
			opts.Stderr(line)
		} else {
			stderr = append(stderr, line...)
		}
	}
	return stderr
}

// wallTimeError names the session's wall-time limit as the cause of a
// guest timeout that it, not the call's own timeout, set.
func wallTimeError(limits Limits, opts session.ShellOptions, err error) error {
	if wall := limits.WallTime; wall > 0 && (opts.GuestTimeout <= 0 || wall < opts.GuestTimeout) && errors.Is(err, session.ErrGuestTimeout) {
		return fmt.Errorf("the session's wall-time limit of %s was reached: %w", wall, session.ErrGuestTimeout)
	}
	return err
}

// minPositive is the smallest positive value, or 0 when there is none.
func minPositive[T ~int64](vs ...T) T {
	var m T
	for _, v := range vs {
		if v > 0 && (m == 0 || v < m) {
			m = v
		}
	}
	return m
}

// user maps ShellOptions.User: "" (or the guest uid) is the unprivileged
// guest user, "0" is root inside the sandbox, for preparing uploads and
// skills; anything else is refused.
func (s *Session) user(u string) (root bool, err error) {
	switch u {
	case "", strconv.Itoa(guestUID):
		return false, nil
	case "0":
		return true, nil
	}
	return false, &PolicyError{Field: "user", Value: u, Reason: `only the default user and "0" exist in a local sandbox`}
}

// workdir resolves a command's working directory physically: it must
// name a directory inside the workspace after every symlink is followed.
func (s *Session) workdir(w string) (string, error) {
	if w == "" {
		w = s.paths.Workspace
	}
	_, rel, err := jailPath(w, s.paths.Workspace)
	if err != nil {
		return "", err
	}
	wsReal, err := filepath.EvalSymlinks(s.dirs.Workspace)
	if err != nil {
		return "", fmt.Errorf("local sandbox %s: workspace is gone (%v): %w", s.rec.Name, err, session.ErrGone)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(s.dirs.Workspace, rel))
	if err != nil {
		return "", &PolicyError{Field: "workdir", Value: w, Reason: "cannot be resolved: " + err.Error()}
	}
	if !within(real, wsReal) {
		return "", &EscapeError{Path: w, Root: s.paths.Workspace, Reason: "resolves outside the workspace"}
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", &PolicyError{Field: "workdir", Value: w, Reason: "not a directory"}
	}
	rel, _ = filepath.Rel(wsReal, real)
	return filepath.Join(s.paths.Workspace, rel), nil
}

// hostDir maps a root of Paths to the host directory behind it.
func (s *Session) hostDir(guestRoot string) string {
	switch guestRoot {
	case s.paths.Uploads:
		return s.dirs.Uploads
	case s.paths.Outputs:
		return s.dirs.Outputs
	}
	return s.dirs.Workspace
}

// CopyIn copies a host file or directory to an absolute path under the
// workspace, uploads or outputs, writing on the host side. A directory's
// contents land at guestPath (merged into it if it exists). The path is
// jailed to its root: `..`, prefix tricks and symlinks leading out are
// refused, and existing symlinks are never written through. Uploads and
// skills are root's, everything else the guest user's.
func (s *Session) CopyIn(ctx context.Context, hostPath, guestPath string) error {
	cctx, end, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	gRoot, rel, err := jailPath(guestPath, s.paths.Workspace, s.paths.Uploads, s.paths.Outputs)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(hostPath)
	if err != nil {
		return fmt.Errorf("local sandbox: copy source: %w", err)
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return &PolicyError{Field: "copy source", Value: hostPath, Reason: "not a regular file or directory"}
	}
	if !fi.IsDir() && rel == "." {
		return &PolicyError{Field: "copy target", Value: guestPath, Reason: "a file cannot replace a session directory"}
	}
	hostRoot := s.hostDir(gRoot)
	r, err := os.OpenRoot(hostRoot)
	if err != nil {
		return fmt.Errorf("local sandbox %s: %w", s.rec.Name, err)
	}
	defer r.Close()
	c := copier{ctx: cctx, root: r, hostRoot: hostRoot, own: func(p string) (int, int, bool) { return s.plat.owner(s.dirs, p) }}
	if err := c.mkdirs(filepath.Dir(rel)); err != nil {
		return err
	}
	if fi.IsDir() {
		return c.tree(hostPath, rel)
	}
	return c.file(hostPath, rel, fi.Mode().Perm())
}

// copier writes inside one session directory through an os.Root, so no
// path, symlink or rename race leads outside it.
type copier struct {
	ctx      context.Context
	root     *os.Root
	hostRoot string
	own      func(p string) (uid, gid int, ok bool)
}

func (c copier) chown(rel string) error {
	if uid, gid, ok := c.own(filepath.Join(c.hostRoot, rel)); ok {
		return c.root.Lchown(rel, uid, gid)
	}
	return nil
}

// mkdirs creates the missing directories of rel, each owned as its place
// requires; an existing non-directory or symlink on the way is refused.
func (c copier) mkdirs(rel string) error {
	if rel == "." {
		return nil
	}
	if err := c.mkdirs(filepath.Dir(rel)); err != nil {
		return err
	}
	fi, err := c.root.Lstat(rel)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return &EscapeError{Path: rel, Root: c.hostRoot, Reason: "exists and is not a directory"}
	case !os.IsNotExist(err):
		return err
	}
	if err := c.root.Mkdir(rel, 0o755); err != nil {
		return err
	}
	return c.chown(rel)
}

func (c copier) file(src, rel string, perm fs.FileMode) error {
	if err := c.ctx.Err(); err != nil {
		return ctxError(c.ctx)
	}
	fi, err := c.root.Lstat(rel)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return &EscapeError{Path: rel, Root: c.hostRoot, Reason: "target exists and is not a regular file"}
	case os.IsNotExist(err):
		fi = nil
	case err != nil:
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	// The file checked, never a FIFO or another file put in its place.
	out, err := openToReplace(c.root, rel, fi, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chmod(perm)
	}
	if uid, gid, ok := c.own(filepath.Join(c.hostRoot, rel)); ok && err == nil {
		err = out.Chown(uid, gid)
	}
	return errors.Join(err, out.Close())
}

func (c copier) tree(src, rel string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		sub, _ := filepath.Rel(src, p)
		dst := filepath.Join(rel, sub)
		switch {
		case d.IsDir():
			return c.mkdirs(dst)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return c.file(p, dst, fi.Mode().Perm())
		}
		return &PolicyError{Field: "copy source", Value: p, Reason: "not a regular file or directory"}
	})
}
