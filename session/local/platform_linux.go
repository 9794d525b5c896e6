package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/internal/confine"
	"github.com/oma-sandbox/oma-sandbox/session"
)

const probeTimeout = 5 * time.Second

// markerScript reports startMarker on fd 3, closes it, and runs the command.
const markerScript = `printf R >&3 && exec "$@" 3>&-`

// linuxPlatform runs each call under bubblewrap.
type linuxPlatform struct {
	bwrap      string
	setpriv    string
	prlimit    string
	privileged bool
	system     []hostEntry
	cgroups    cgLayout
	landlock   int // the kernel's Landlock ABI; 0 without Landlock
}

func (p *linuxPlatform) paths(hostDirs) session.Paths {
	return session.Paths{Workspace: guestWorkspace, Uploads: guestUploads, Outputs: guestOutputs, Skills: guestSkills}
}

// prepare gives the directories the msb image's owners and modes: the
// workspace and outputs are the guest user's, uploads and skills root's.
func (p *linuxPlatform) prepare(d hostDirs) error {
	if err := os.Chmod(d.Outputs, 0o700); err != nil {
		return err
	}
	if !p.privileged {
		return nil
	}
	for _, dir := range []string{d.Workspace, d.Outputs} {
		if err := os.Chown(dir, guestUID, guestUID); err != nil {
			return err
		}
	}
	return nil
}

func (p *linuxPlatform) owner(d hostDirs, path string) (int, int, bool) {
	if !p.privileged {
		return 0, 0, false
	}
	if within(path, d.Uploads) || within(path, d.Skills) {
		return 0, 0, true
	}
	return guestUID, guestUID, true
}

func (p *linuxPlatform) launch(c call) (l *launched, err error) {
	spec := bwrapSpec{
		Mode: c.policy.Mode, Network: c.policy.Network,
		Workspace: c.dirs.Workspace, Uploads: c.dirs.Uploads, Outputs: c.dirs.Outputs,
		Workdir: c.workdir, Env: c.env, Privileged: p.privileged, Setpriv: p.setpriv, Root: c.root,
		System: p.system, Agent: c.agent,
		Command: append([]string{"/bin/sh", "-c", markerScript, "oma-sandbox"}, c.argv...),
	}
	switch {
	case c.root:
		// Preparing uploads never needs the host: root stays confined.
		spec.Mode, spec.Network = ModeWorkspaceWrite, NetworkDeny
	case c.policy.Mode == ModeDangerFullAccess:
		spec.System = dangerEntries()
	}
	if c.agent != "" && spec.Network != NetworkAllowlist {
		// The agent writes the start marker itself: no shell. (The egress
		// relay runs its command without fd 3, so there the shell does.)
		spec.Command = slices.Concat(c.argv[:2], []string{"--ready-fd=" + strconv.Itoa(markerFD)}, c.argv[2:])
	}
	filter, scoped, err := p.socketConfinement(spec)
	if err != nil {
		return nil, fmt.Errorf("local sandbox %s: seccomp filter: %v: %w", c.name, err, session.ErrCannotStart)
	}
	// fd 3 is the start marker (see run); the filter is the next one.
	spec.SeccompFD = 4
	if spec.Network == NetworkAllowlist {
		eg, err := startEgress(&spec, c.name, c.policy.egress(), c.refused)
		if err != nil {
			filter.Close()
			return nil, fmt.Errorf("local sandbox %s: %v: %w", c.name, err, session.ErrCannotStart)
		}
		defer func() {
			if err != nil {
				eg.stop()
				return
			}
			finish := l.finish
			l.finish = func() []string { return append(finish(), eg.stop()...) }
		}()
	}
	argv := append([]string{p.bwrap}, spec.args()...)
	if c.limits.FileSize > 0 {
		argv = append([]string{p.prlimit, "--fsize=" + strconv.FormatInt(c.limits.FileSize, 10), "--"}, argv...)
	}
	cmd := &exec.Cmd{Env: []string{"PATH=" + os.Getenv("PATH")}, ExtraFiles: []*os.File{filter}}
	l = &launched{cmd: cmd, marker: true, finish: func() []string { filter.Close(); return nil }}
	if scoped {
		l.start = confine.StartScoped
	}
	if c.limits.cgroupNeeded() {
		g, err := p.cgroups.create(c.dirs.Root, c.name, "call", c.limits, false)
		if err != nil {
			filter.Close()
			return nil, fmt.Errorf("local sandbox %s: refusing to run without its limits: %w: %w", c.name,
				&UnavailableError{Control: "resources", Reason: err.Error()}, session.ErrCannotStart)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		var fd *os.File
		if argv, fd, err = g.place(argv, cmd.SysProcAttr); err != nil {
			filter.Close()
			g.remove()
			return nil, fmt.Errorf("local sandbox %s: cgroup: %v: %w", c.name, err, session.ErrCannotStart)
		}
		l.finish = func() []string {
			filter.Close()
			if fd != nil {
				fd.Close()
			}
			notes := g.notes(limitEvents{})
			if err := g.remove(); err != nil {
				notes = append(notes, "cgroup cleanup deferred to close: "+err.Error())
			}
			return notes
		}
	}
	cmd.Path, cmd.Args = argv[0], argv
	return l, nil
}

// socketConfinement is the seccomp filter of a sandbox of spec, and
// whether Landlock scopes its abstract unix sockets. The host's abstract
// sockets are out of reach in every mode but danger-full-access: scoped
// by Landlock where the kernel can, else, when the sandbox shares the
// host's network, no AF_UNIX sockets at all.
func (p *linuxPlatform) socketConfinement(spec bwrapSpec) (filter *os.File, scoped bool, err error) {
	danger := spec.Mode == ModeDangerFullAccess
	scoped = !danger && p.landlock >= confine.ScopeABI
	filter, err = confine.FilterFile(confine.FilterOptions{DenyUnixSockets: !scoped && !danger && spec.Network == NetworkUnrestricted})
	return filter, scoped, err
}

// newLinuxPlatform finds the host tools a sandbox needs, running none of
// them; nil and why when one is missing.
func newLinuxPlatform(req probeRequest) (*linuxPlatform, string) {
	name := req.bwrap
	if name == "" {
		name = "bwrap"
	}
	bw, err := exec.LookPath(name)
	if err != nil {
		return nil, "bubblewrap not found: " + err.Error()
	}
	p := &linuxPlatform{bwrap: bw, privileged: os.Geteuid() == 0, system: hostEntries(runtimeDirs), landlock: confine.LandlockABI()}
	if p.privileged {
		sp, err := exec.LookPath("setpriv")
		if err != nil || !insideUsr(sp) {
			return nil, "running as root needs setpriv under /usr to drop commands to uid 65534"
		}
		p.setpriv, _ = filepath.EvalSymlinks(sp)
	}
	return p, ""
}

func probeHost(ctx context.Context, req probeRequest) (Capabilities, platform) {
	caps := Capabilities{Platform: "linux", Limits: map[string]Control{}, Modes: allModes, NetworkModes: []Network{NetworkDeny, NetworkUnrestricted, NetworkAllowlist}}
	fail := func(why string) (Capabilities, platform) {
		caps.Filesystem, caps.Network, caps.Process = none(why), none(why), none(why)
		for _, k := range limitKeys {
			caps.Limits[k] = none("no working sandbox")
		}
		caps.Resources = summarizeResources(caps.Limits)
		return caps, nil
	}
	p, why := newLinuxPlatform(req)
	if p == nil {
		return fail(why)
	}
	tmp, err := os.MkdirTemp("", "oma-sandbox-probe-")
	if err != nil {
		return fail("no directory for the probe: " + err.Error())
	}
	defer removeSession(tmp)
	dirs := dirsOf(tmp)
	for _, d := range []string{dirs.Box, dirs.Workspace, dirs.Uploads, dirs.Outputs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fail("no directory for the probe: " + err.Error())
		}
	}
	canary := filepath.Join(tmp, "canary")
	if err := errors.Join(os.WriteFile(canary, nil, 0o644), os.WriteFile(filepath.Join(dirs.Workspace, "probe"), nil, 0o644)); err != nil {
		return fail("no files for the probe: " + err.Error())
	}
	isolation := probeIsolation(ctx, p, dirs, canary)
	caps.Backend = "bubblewrap"
	caps.Filesystem, caps.Network, caps.Process = isolation.fs, isolation.net, isolation.proc
	if isolation.fs.Evidence != EvidenceFull || isolation.proc.Evidence == EvidenceNone {
		caps.Backend = ""
	}
	host := "enforced by the host: the call's process group is killed and its pid namespace goes with it"
	for _, k := range []string{LimitWallTime, LimitOutput} {
		if caps.Backend != "" {
			caps.Limits[k] = full(host)
		} else {
			caps.Limits[k] = none("no working sandbox")
		}
	}
	probeLimits(ctx, p, dirs, req, caps.Backend != "", caps.Limits)
	caps.Resources = summarizeResources(caps.Limits)
	if caps.Backend == "" {
		return caps, nil
	}
	return caps, p
}

// isolationScript prints, from inside the sandbox, the facts the probe
// checks. $1 is a host file that must not be visible.
const isolationScript = `echo "netns=$(readlink /proc/self/ns/net)"
echo "pidns=$(readlink /proc/self/ns/pid)"
echo "mntns=$(readlink /proc/self/ns/mnt)"
n=0; for d in /proc/[0-9]*; do n=$((n+1)); done; echo "procs=$n"
while read -r k v rest; do case $k in Uid:) echo "uid=$v";; CapEff:) echo "capeff=$v";; NoNewPrivs:) echo "nnp=$v";; Seccomp:) echo "seccomp=$v";; esac; done < /proc/self/status
[ -e "$1" ] && echo canary=visible || echo canary=hidden
[ -e /workspace/probe ] && echo workspace=visible || echo workspace=missing
( : > /workspace/written ) 2>/dev/null && echo rowrite=allowed || echo rowrite=denied`

type isolationResult struct{ fs, net, proc Control }

func probeIsolation(ctx context.Context, p *linuxPlatform, dirs hostDirs, canary string) isolationResult {
	fail := func(why string) isolationResult { return isolationResult{none(why), none(why), none(why)} }
	facts, err := probeRun(ctx, p, dirs, Limits{}, isolationScript, canary)
	if err != nil {
		return fail(fmt.Sprintf("%s did not run a sandboxed /bin/sh: %v", p.bwrap, err))
	}
	hostNS := func(kind string) string {
		s, _ := os.Readlink("/proc/self/ns/" + kind)
		return s
	}
	var idProblems []string
	if facts["uid"] != strconv.Itoa(guestUID) {
		idProblems = append(idProblems, "commands run as uid "+facts["uid"]+", not "+strconv.Itoa(guestUID))
	}
	if facts["capeff"] != "0000000000000000" {
		idProblems = append(idProblems, "commands hold capabilities "+facts["capeff"])
	}
	if facts["seccomp"] != "2" {
		idProblems = append(idProblems, "commands run without the seccomp filter")
	}
	if p.privileged && facts["nnp"] != "1" {
		idProblems = append(idProblems, "no_new_privs is not set")
	}
	var r isolationResult
	switch {
	case facts["mntns"] == "" || facts["mntns"] == hostNS("mnt"):
		r.fs = none("commands share the host's mount namespace")
	case facts["canary"] != "hidden":
		r.fs = none("a host file outside the workspace is visible")
	case facts["workspace"] != "visible":
		r.fs = none("the workspace is not visible at " + guestWorkspace)
	case facts["rowrite"] != "denied":
		r.fs = none("the read-only workspace accepted a write")
	case len(idProblems) > 0:
		r.fs = none(strings.Join(idProblems, "; "))
	default:
		r.fs = full("bubblewrap mount namespace: only /usr, /etc, runtime dirs (read-only) and the session dirs are visible; commands run as uid 65534 without capabilities")
	}
	if facts["netns"] == "" || facts["netns"] == hostNS("net") {
		r.net = none("commands share the host's network namespace")
	} else {
		r.net = full("own network namespace with loopback only; unrestricted mode shares the host's")
	}
	procs, _ := strconv.Atoi(facts["procs"])
	switch {
	case facts["pidns"] == "" || facts["pidns"] == hostNS("pid"):
		r.proc = none("commands share the host's pid namespace")
	case procs == 0 || procs > 3:
		r.proc = none(fmt.Sprintf("%d processes visible in the sandbox's /proc", procs))
	case len(idProblems) > 0:
		r.proc = none(strings.Join(idProblems, "; "))
	case !p.privileged && !yamaGuardsInit():
		r.proc = partial("own pid namespace, but commands can ptrace the sandbox's init: it runs as their uid and Yama ptrace_scope is below 1")
	default:
		r.proc = full("own pid namespace: only the session's processes are visible (a sandbox per call: the call's), all die with their sandbox, and none can ptrace its init or the agent")
	}
	return r
}

// yamaGuardsInit reports whether Yama restricts ptrace to descendants,
// which keeps a command from tracing the sandbox's init when both run as
// the same uid.
func yamaGuardsInit() bool {
	data, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return err == nil && n >= 1
}

// probeRun runs script in a read-only, network-less sandbox over dirs,
// with lim applied, and returns its key=value output lines.
func probeRun(ctx context.Context, p *linuxPlatform, dirs hostDirs, lim Limits, script string, args ...string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	l, err := p.launch(call{
		name: "probe-" + strconv.Itoa(os.Getpid()), dirs: dirs,
		policy: Policy{Mode: ModeReadOnly, Network: NetworkDeny}, limits: lim,
		env: []string{"PATH=" + guestPath}, workdir: guestWorkspace,
		argv: append([]string{"/bin/sh", "-c", script, "probe"}, args...),
	})
	if err != nil {
		return nil, err
	}
	res, err := run(ctx, runSpec{cmd: l.cmd, marker: l.marker, start: l.start, maxOutput: 64 << 10})
	l.finish()
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("probe exited with %d: %s", res.ExitCode, trimMsg(string(res.Stderr)))
	}
	facts := map[string]string{}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			facts[k] = v
		}
	}
	return facts, nil
}

// limitsScript prints the file-size limit and the cgroups a command is in.
const limitsScript = `while read -r l; do case $l in "Max file size"*) set -- $l; echo "fsize=$4";; esac; done < /proc/self/limits
while IFS=: read -r id ctl path; do echo "cg.$ctl=$path"; done < /proc/self/cgroup`

// probeLimits proves each limit a request needs (or all of them) by
// running a sandbox under it and reading, from inside, that it applies.
func probeLimits(ctx context.Context, p *linuxPlatform, dirs hostDirs, req probeRequest, sandbox bool, out map[string]Control) {
	if !sandbox {
		for _, k := range []string{LimitMemory, LimitProcesses, LimitCPU, LimitFileSize} {
			out[k] = none("no working sandbox")
		}
		return
	}
	want := func(k string) bool { return req.all || req.limits.has(k) }
	if want(LimitFileSize) {
		out[LimitFileSize] = probeFileSize(ctx, p, dirs)
	} else {
		out[LimitFileSize] = none("not probed: the policy sets no file-size limit")
	}
	// Afresh: the probe proves the limits on the layout as it is now.
	p.cgroups = readCgroups()
	var lim Limits
	for _, k := range []string{LimitMemory, LimitProcesses, LimitCPU} {
		switch how, ok := p.cgroups.support(controllerOf[k]); {
		case !want(k):
			out[k] = none("not probed: the policy sets no " + k + " limit")
		case !ok:
			out[k] = none(how)
		default:
			out[k] = partial(how)
			switch k {
			case LimitMemory:
				lim.MemoryBytes = 256 << 20
			case LimitProcesses:
				lim.Processes = 1024
			case LimitCPU:
				lim.CPUQuota = 100 * time.Millisecond
			}
		}
	}
	if !lim.cgroupNeeded() {
		return
	}
	facts, err := probeRun(ctx, p, dirs, lim, limitsScript)
	for _, k := range []string{LimitMemory, LimitProcesses, LimitCPU} {
		if out[k].Evidence != EvidencePartial {
			continue
		}
		ctl := controllerOf[k]
		where := facts["cg."+ctl]
		if where == "" {
			where = facts["cg."] // the unified hierarchy
		}
		switch {
		case err != nil:
			out[k] = none("a sandbox under " + ctl + " limits did not run: " + err.Error())
		case !strings.Contains(where, "/oma-probe-"):
			out[k] = none("the sandboxed command was not in its " + ctl + " cgroup (it was in " + where + ")")
		default:
			out[k] = full(out[k].Detail)
		}
	}
}

func probeFileSize(ctx context.Context, p *linuxPlatform, dirs hostDirs) Control {
	pl, err := exec.LookPath("prlimit")
	if err != nil {
		return none("prlimit not found: " + err.Error())
	}
	p.prlimit = pl
	const probeSize = 1234567
	facts, err := probeRun(ctx, p, dirs, Limits{FileSize: probeSize}, limitsScript)
	if err != nil {
		return none("a sandbox under prlimit did not run: " + err.Error())
	}
	if facts["fsize"] != strconv.Itoa(probeSize) {
		return none("the sandboxed command's file-size limit was " + facts["fsize"] + ", not the one set")
	}
	return full("RLIMIT_FSIZE set by prlimit before bwrap executes, inherited by every process")
}

// residentHostUID is the host uid a resident sandbox's agent runs as: it
// serves as root of a user namespace of its own in which 0 maps to this
// uid, which no host account has (startResident checks /etc/passwd), and
// the guest user to itself, so its capabilities reach nothing of the
// host's and its calls' processes, the guest user's, cannot reach it.
const residentHostUID = 2147418112

// residentCaps are what the sandbox's first process keeps to write the
// agent's user namespace maps.
var residentCaps = []string{"CAP_SETUID", "CAP_SETGID"}

// residentUnprivilegedCaps are what the agent keeps, in the sandbox's
// user namespace, to start its commands' pid and mount namespaces and
// enter them.
var residentUnprivilegedCaps = []string{"CAP_SYS_ADMIN", "CAP_SYS_CHROOT"}

var _ residentStarter = (*linuxPlatform)(nil)

// startResident starts a session's resident sandbox: bwrap over the
// session's directories, as for one call, running `agent serve` in a
// user namespace of its own with the guest user as its default user,
// serving each connection accepted on ln (a listening unix socket) as a
// channel; stderr takes its diagnostics. The sandbox does not end with
// this process (nor with the thread that started it): it is a session's,
// ended through the procs returned, by any process. The seccomp filter of
// every call is the agent's, which it installs before it accepts a
// connection (the first process, which only waits for it, needs the user
// namespace the filter refuses). Only host root can map that user
// namespace; where oma-sandbox is another user, bwrap's user namespace
// maps that user to the guest's uid, the agent runs as it, and its
// commands run in a pid namespace of their own instead (serve
// --commands-pidns). The session's memory and CPU limits are groups of
// the sandbox's own, which bwrap enters before it executes, as a call's
// sandbox does.
func (p *linuxPlatform) startResident(c call, ln, stderr *os.File) (procs residentProcs, err error) {
	guest := strconv.Itoa(guestUID)
	apart := []string{"--commands-pidns"}
	if p.privileged {
		if taken, err := uidTaken(residentHostUID); err != nil || taken {
			return procs, fmt.Errorf("uid %d is a host account's (or /etc/passwd is unreadable: %v)", residentHostUID, err)
		}
		apart = []string{"--userns=" + strconv.Itoa(residentHostUID) + ":" + guest, "--default-user", guest}
	}
	spec := bwrapSpec{
		Mode: c.policy.Mode, Network: c.policy.Network,
		Workspace: c.dirs.Workspace, Uploads: c.dirs.Uploads, Outputs: c.dirs.Outputs,
		Workdir: guestWorkspace, Env: c.env, Privileged: p.privileged, Resident: true,
		System: p.system, Agent: c.agent,
		Command: append(append([]string{agentGuestPath, "serve"}, apart...),
			"--default-workdir", guestWorkspace, "--seccomp-fd=3", "--listen-fd=4"),
	}
	if c.policy.Mode == ModeDangerFullAccess {
		spec.System = dangerEntries()
	}
	var eg *residentEgress
	if c.policy.Network == NetworkAllowlist {
		if eg, err = prepareResidentEgress(&spec, c.dirs.Root, c.name, c.policy.egress()); err != nil {
			return procs, err
		}
		defer func() {
			if eg != nil {
				eg.close() // not started
			}
		}()
	}
	// Groups of its own also let Pause freeze it; a host that cannot
	// give it a freezer only loses that (Pause then ends it).
	g, err := p.cgroups.create(c.dirs.Root, c.name, "resident", c.limits, p.cgroups.canFreeze())
	if err != nil && !c.limits.cgroupNeeded() {
		g, err = nil, nil
	}
	if err != nil {
		return procs, fmt.Errorf("cgroup: %w", err)
	}
	files := []*os.File{nil, ln, nil} // 3: the filter, 5: bwrap's info
	if g != nil {
		defer func() {
			if err != nil {
				g.remove()
			}
		}()
		procs.Cgroup = g.leaf()
		if g.commands != "" {
			// The agent puts each call's processes in the group through
			// this descriptor, opened here, by the host: the kernel checks
			// its opener's right to move them.
			procsFile, err := os.OpenFile(filepath.Join(g.commands, "cgroup.procs"), os.O_WRONLY, 0)
			if err != nil {
				return procs, fmt.Errorf("cgroup: %w", err)
			}
			defer procsFile.Close()
			files = append(files, procsFile)
			spec.Command = append(spec.Command, "--commands-cgroup-fd="+strconv.Itoa(2+len(files)))
		}
	}
	filter, scoped, err := p.socketConfinement(spec)
	if err != nil {
		return procs, fmt.Errorf("seccomp filter: %w", err)
	}
	defer filter.Close()
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return procs, err
	}
	defer infoR.Close()
	files[0], files[2] = filter, infoW
	argv := append([]string{p.bwrap, "--info-fd", "5"}, spec.args()...)
	if c.limits.FileSize > 0 {
		argv = append([]string{p.prlimit, "--fsize=" + strconv.FormatInt(c.limits.FileSize, 10), "--"}, argv...)
	}
	// A session of its own: no terminal's signal reaches it.
	attr := &syscall.SysProcAttr{Setsid: true}
	if g != nil {
		var dir *os.File
		if argv, dir, err = g.place(argv, attr); err != nil {
			infoW.Close()
			return procs, fmt.Errorf("cgroup: %w", err)
		}
		if dir != nil {
			defer dir.Close()
		}
	}
	cmd := &exec.Cmd{
		Path: argv[0], Args: argv, Env: []string{"PATH=" + os.Getenv("PATH")},
		Stderr: stderr, ExtraFiles: files, SysProcAttr: attr,
	}
	release, err := confine.StartHeld(cmd, scoped)
	infoW.Close()
	if err != nil {
		return procs, err
	}
	// Nothing dies with the starting thread: it may end now.
	release()
	// Opened before bwrap can be reaped, so the pid is bwrap's.
	bwrapFD, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	go func() { _ = cmd.Wait() }() // while this process lives, it reaps bwrap
	if err != nil {
		_ = cmd.Process.Kill()
		return procs, fmt.Errorf("bwrap: %w", err)
	}
	bwrapPidfd := os.NewFile(uintptr(bwrapFD), "bwrap")
	defer bwrapPidfd.Close()
	procs.Bwrap = procOf(cmd.Process.Pid)
	pid, fd := sandboxInit(infoR, cmd.Process.Pid)
	if fd < 0 {
		_ = cmd.Process.Kill()
		return procs, errors.New("bwrap reported no sandbox")
	}
	// Checked as bwrap's child: from here its start time names it.
	procs.Init = procOf(pid)
	unix.Close(fd)
	if procs.Init.PID == 0 || procs.Bwrap.Start == 0 {
		procs.end(c.dirs.Root, time.Now().Add(stopTimeout))
		_ = cmd.Process.Kill()
		return procs, errors.New("the sandbox ended as it started")
	}
	if eg != nil {
		// The proxy serves until bwrap ends; the agent's relay reaches it
		// as soon as it listens (connections wait in the socket's queue).
		procs.Proxy, err = eg.start(bwrapPidfd, stderr)
		eg = nil
		if err != nil {
			procs.end(c.dirs.Root, time.Now().Add(stopTimeout))
			return procs, err
		}
	}
	return procs, nil
}

// sandboxInit reads bwrap's --info-fd report and returns the pid of the
// sandbox's init (bwrap's child) and a pidfd of it; -1 when bwrap
// reported none.
func sandboxInit(info io.Reader, bwrap int) (pid, fd int) {
	var report struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(io.LimitReader(info, 4096)).Decode(&report); err != nil || report.ChildPID <= 0 {
		return 0, -1
	}
	fd, err := unix.PidfdOpen(report.ChildPID, 0)
	if err != nil {
		return 0, -1
	}
	// The pid is bwrap's child, which bwrap, alive until its child ends,
	// has not reaped: it is not a recycled pid.
	if parentOf(report.ChildPID) != bwrap {
		unix.Close(fd)
		return 0, -1
	}
	return report.ChildPID, fd
}

// parentOf is pid's parent, from /proc; 0 when unknown.
func parentOf(pid int) int {
	ppid, _ := strconv.Atoi(statField(pid, 1))
	return ppid
}

// statField is field n of /proc/PID/stat after the command name (0 is the
// state); "" when pid is gone. The name, which the process chooses, may
// hold spaces and parentheses: the fields start after its last ')'.
func statField(pid, n int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	return fieldOfStat(b, n)
}

// fieldOfStat is field n after the command name of a /proc/PID/stat line
// (0: the state); "" when there is none. The name is the guest's to pick,
// spaces and parentheses included: it ends at the line's last ')'.
func fieldOfStat(b []byte, n int) string {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) <= n {
		return ""
	}
	return f[n]
}

// uidTaken reports whether /etc/passwd names uid.
func uidTaken(uid int) (bool, error) {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return false, err
	}
	id := strconv.Itoa(uid)
	for line := range strings.Lines(string(b)) {
		if f := strings.Split(line, ":"); len(f) > 2 && f[2] == id {
			return true, nil
		}
	}
	return false, nil
}
