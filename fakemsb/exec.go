//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const guestPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// droppedCaps keeps guest root from changing the host it shares a kernel
// with (mounts, modules, clock, host network when --no-net is not given).
// Without sys_ptrace, guests cannot trace or read the descriptors of the
// processes that hold every capability (the holder's init, a launcher
// that has not yet loaded its filter); they still trace their own.
const droppedCaps = "-sys_admin,-sys_ptrace,-sys_module,-sys_rawio,-sys_boot,-sys_time,-net_admin,-mknod,-mac_admin,-mac_override,-syslog,-audit_control,-sys_pacct"

// acquire returns a snapshot of the running sandbox name, starting a
// Stopped sandbox for the duration of the call; release undoes that start.
func (a *app) acquire(name string) (*sandbox, func(), error) {
	var snap sandbox
	transient := false
	err := a.withState(func(st *state) error {
		sb, err := st.get(name)
		if err != nil {
			return err
		}
		if sb.Status != statusRunning {
			if err := a.startHolder(sb, st); err != nil {
				return err
			}
			sb.UpdatedAt = a.now
			transient = true
		}
		if transient || sb.TransientExecs > 0 {
			sb.TransientExecs++
			transient = true
		}
		snap = *sb
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	release := func() {
		if !transient {
			return
		}
		_ = a.withState(func(st *state) error {
			sb, ok := st.Sandboxes[name]
			if !ok || sb.TransientExecs == 0 {
				return nil
			}
			if sb.TransientExecs--; sb.TransientExecs == 0 {
				a.stopSandbox(sb)
			}
			return nil
		})
	}
	return &snap, release, nil
}

func (a *app) exec(p *parsed) error {
	s := p.spec
	if p.has("stream") && p.has("tty") {
		return s.usageError("the argument '--stream' cannot be used with '--tty'")
	}
	var timeout time.Duration
	if p.has("timeout") {
		n, err := parseDurationSecs(p.str("timeout"))
		if err != nil {
			return failf("%v", err)
		}
		timeout = time.Duration(n) * time.Second
	}
	var overrides []string
	for _, e := range p.vals["env"] {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			hv, set := os.LookupEnv(e)
			if !set {
				return failf("environment variable '%s' not set", e)
			}
			v = hv
		}
		if k == "" {
			return s.invalidFlag("env", e, "empty variable name")
		}
		overrides = append(overrides, k+"="+v)
	}
	argv := p.last
	// Without --stream, stdin is read to EOF before the guest command
	// starts, as msb v0.6.14 does. With --stream it is forwarded while the
	// command runs, both ways at once (msb 0.6.18: "safe for JSON lines").
	// A terminal is never read.
	var input io.Reader = bytes.NewReader(nil)
	switch {
	case isTerminal(os.Stdin) && p.has("stream"):
		return failf("--stream cannot be used when stdin is a terminal")
	case isTerminal(os.Stdin):
	case p.has("stream"):
		input = os.Stdin
	default:
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return failf("io error: reading stdin: %v", err)
		}
		input = bytes.NewReader(b)
	}

	name := p.arg("NAME")
	sb, release, err := a.acquire(name)
	if err != nil {
		return err
	}
	defer release()

	root, err := openGuestRoot(sb.Holder.InitPID)
	if err != nil {
		return failf("sandbox not found: %s", name)
	}
	defer root.close()
	// As msb does, the command runs as the image's user with the image's
	// env (PATH and HOME as a bare root shell has them where it sets none)
	// in its workdir, unless exec or create says otherwise.
	env := []string{"PATH=" + guestPATH, "HOME=/root"}
	var egressEnv, relay []string
	if pol, ok := sb.egressPolicy(); ok {
		e, eEnv, r, err := a.startEgress(sb, pol)
		if err != nil {
			return failf("exec failed: egress proxy: %v", err)
		}
		defer e.stop()
		egressEnv, relay = eEnv, r
	}
	for _, e := range slices.Concat(sb.ImageConfig.Env, egressEnv, overrides) {
		k, v, _ := strings.Cut(e, "=")
		env = setEnv(env, k, v)
	}
	user := sb.ImageConfig.User
	if p.has("user") {
		user = p.str("user")
	}
	uid, gid := 0, 0
	if user != "" {
		if uid, gid, err = root.lookupUser(user); err != nil {
			return failf("exec failed: %v", err)
		}
	}
	wd := p.str("workdir")
	if wd == "" {
		wd = sb.workdir()
	}
	if wd == "" {
		wd = "/"
	}
	notFound := &exitError{code: 127, msg: errorf("failed to exec %q", argv[0]) +
		fmt.Sprintf("  → not found: spawn %q: No such file or directory (os error 2) (ENOENT)\n  → is `%s` on PATH inside the sandbox? Try `msb exec ... -- which %s`\n", argv[0], argv[0], argv[0])}
	if !path.IsAbs(wd) || !root.isDir(wd) {
		// msb's agent dies on a missing workdir: exit 255, no output, as
		// 0.6.14 did and the guest agent's channel does too. 0.6.18 says
		// it cannot spawn the program (TestMatchesRealVM's known case).
		return &exitError{code: 255}
	}
	switch root.lookPath(argv[0], envValue(env, "PATH"), wd, uid, gid) {
	case 0:
	case unix.ENOENT:
		return notFound
	default:
		return &exitError{code: 126, msg: errorf("failed to exec %q", argv[0]) +
			fmt.Sprintf("  → %s: permission denied\n  → check that it is executable and not on a noexec mount\n", argv[0])}
	}

	launcher, launcherFile, err := guestLauncher(sb)
	if err != nil {
		return failf("exec failed: %v", err)
	}
	defer launcherFile.Close()
	nsArgs := []string{"-t", strconv.Itoa(sb.Holder.InitPID), "-m", "-p", "-i", "-u", "-n", "--wdns=" + wd, "--"}
	nsArgs = append(nsArgs, launcher...)
	nsArgs = append(nsArgs, "/usr/bin/setpriv", "--bounding-set="+droppedCaps)
	if user != "" {
		nsArgs = append(nsArgs, "--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(gid), "--clear-groups")
	}
	nsArgs = append(nsArgs, "--")
	nsArgs = append(nsArgs, relay...)
	cmd := exec.Command("nsenter", append(nsArgs, argv...)...)
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{launcherFile} // guestLauncherFD
	return a.runGuest(cmd, input, p.has("stream"), timeout)
}

// runGuest runs cmd with stdin from input and relays its output until both pipes
// close (a background child that inherited them keeps exec open, as in
// msb), honouring --stream and --timeout.
func (a *app) runGuest(cmd *exec.Cmd, input io.Reader, stream bool, timeout time.Duration) error {
	inR, inW, err := os.Pipe()
	if err != nil {
		return failf("io error: %v", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return failf("io error: %v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return failf("io error: %v", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	// When a timeout kills nsenter before its child, that child is
	// reparented here rather than to the host's init, so that it can be
	// reaped at once: the sandbox's pid namespace cannot die while it lingers.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		return failf("io error: %v", err)
	}
	a.mu.Lock()
	a.killGuest = func() { reap(killTree(cmd.Process)) }
	a.mu.Unlock()

	// The copier may block forever on a guest that never reads, or on a
	// caller that never closes a streamed stdin; the process exits
	// regardless.
	go func() {
		_, _ = io.Copy(inW, input)
		inW.Close()
	}()

	var (
		mu       sync.Mutex
		bufs     [2][]byte
		dropped  bool
		relaying sync.WaitGroup
	)
	sinks := [2]io.Writer{a.stdout, a.stderr}
	for i, r := range []*os.File{outR, errR} {
		relaying.Add(1)
		go func() {
			defer relaying.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					mu.Lock()
					switch {
					case dropped:
					case stream:
						_, _ = sinks[i].Write(buf[:n])
					default:
						bufs[i] = append(bufs[i], buf[:n]...)
					}
					mu.Unlock()
				}
				if err != nil {
					return
				}
			}
		}()
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	drained := make(chan struct{})
	go func() { relaying.Wait(); <-exited; close(drained) }()

	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-drained:
	case <-expired:
		killed := killTree(cmd.Process)
		<-exited
		reap(killed)
		if stream {
			// Keep what the guest already wrote: let the relays catch up
			// with the pipes, but not wait on survivors holding them.
			select {
			case <-drained:
			case <-time.After(100 * time.Millisecond):
			}
		}
		mu.Lock()
		dropped = true
		mu.Unlock()
		return failf("exec timed out after %ds", int(timeout/time.Second))
	}
	if !stream {
		_, _ = a.stdout.Write(bufs[0])
		_, _ = a.stderr.Write(bufs[1])
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return &exitError{code: 255}
	}
	if code := ws.ExitStatus(); code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// killTree SIGKILLs proc and all its descendants. Members are stopped first
// so that none can fork a child that escapes the walk. proc is signalled
// through its pidfd, so a reaped proc is never confused with a recycled pid.
func killTree(proc *os.Process) []procRef {
	if proc.Signal(syscall.SIGSTOP) != nil {
		return nil
	}
	root := proc.Pid
	seen := map[int]bool{root: true}
	for grew := true; grew; {
		grew = false
		children := map[int][]int{}
		for _, p := range listProcs() {
			children[p.ppid] = append(children[p.ppid], p.pid)
		}
		queue := []int{root}
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			for _, c := range children[pid] {
				if !seen[c] {
					seen[c], grew = true, true
					_ = syscall.Kill(c, syscall.SIGSTOP)
				}
				queue = append(queue, c)
			}
		}
	}
	_ = proc.Kill()
	var killed []procRef
	for pid := range seen {
		if pid == root {
			continue
		}
		if st, ok := procStart(pid); ok {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed = append(killed, procRef{pid, st})
		}
	}
	return killed
}

// procRef names a process by pid and start time, which survives pid reuse.
type procRef struct {
	pid   int
	start uint64
}

// reap waits until every killed process has died, reaping those that were
// reparented to this process, so that no guest process outlives the exec.
func reap(procs []procRef) {
	deadline := time.Now().Add(2 * time.Second)
	for _, p := range procs {
		for time.Now().Before(deadline) {
			var ws unix.WaitStatus
			if got, _ := unix.Wait4(p.pid, &ws, unix.WNOHANG, nil); got == p.pid {
				break
			}
			if st, ok := procStart(p.pid); !ok || st != p.start {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func setEnv(env []string, k, v string) []string {
	for i, e := range env {
		if strings.HasPrefix(e, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

func envValue(env []string, k string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, k+"="); ok {
			return v
		}
	}
	return ""
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
