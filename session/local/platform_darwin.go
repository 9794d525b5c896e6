package local

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/oma-sandbox/oma-sandbox/internal/safefs"
	"github.com/oma-sandbox/oma-sandbox/session"
)

const (
	probeTimeout = 5 * time.Second
	// markerScript reports startMarker on fd 3, closes it, and runs the command.
	markerScript = `printf R >&3 && exec "$@" 3>&-`
	// groupOnly is why process control is partial without a pid namespace.
	groupOnly = "the call's process group is killed; without a pid namespace a command that starts its own session can outlive its call"
)

// darwinPlatform runs each call under Seatbelt. There is no path
// remapping on macOS, so commands see the host paths and Paths reports
// them.
type darwinPlatform struct{ sandboxExec string }

func physical(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func (p *darwinPlatform) paths(d hostDirs) session.Paths {
	ws := physical(d.Workspace)
	return session.Paths{Workspace: ws, Uploads: physical(d.Uploads), Outputs: physical(d.Outputs), Skills: filepath.Join(ws, "skills")}
}

func (p *darwinPlatform) prepare(d hostDirs) error { return os.Chmod(d.Outputs, 0o700) }

func (p *darwinPlatform) owner(hostDirs, string) (int, int, bool) { return 0, 0, false }

func (p *darwinPlatform) launch(c call) (*launched, error) {
	paths := p.paths(c.dirs)
	spec := seatbeltSpec{Mode: c.policy.Mode, Network: c.policy.Network, Root: c.root,
		Workspace: paths.Workspace, Uploads: paths.Uploads, Outputs: paths.Outputs, Env: c.env,
		Command: append([]string{"/bin/sh", "-c", markerScript, "oma-sandbox"}, c.argv...)}
	argv, err := spec.argv(p.sandboxExec)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: argv[0], Args: argv, Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: c.workdir}
	return &launched{cmd: cmd, marker: true, finish: func() []string { return nil }}, nil
}

func probeHost(ctx context.Context, req probeRequest) (Capabilities, platform) {
	caps := Capabilities{Platform: "darwin", Limits: map[string]Control{}, Modes: allModes, NetworkModes: []Network{NetworkDeny, NetworkUnrestricted}}
	for _, k := range []string{LimitMemory, LimitProcesses, LimitCPU} {
		caps.Limits[k] = none("macOS has no cgroups to contain a call")
	}
	caps.Limits[LimitFileSize] = none("no file-size limit is applied on macOS")
	fail := func(why string) (Capabilities, platform) {
		caps.Filesystem, caps.Network, caps.Process = none(why), none(why), none(why)
		caps.Limits[LimitWallTime], caps.Limits[LimitOutput] = none(why), none(why)
		caps.Resources = summarizeResources(caps.Limits)
		return caps, nil
	}
	se, err := exec.LookPath("sandbox-exec")
	if err != nil {
		return fail("sandbox-exec not found: " + err.Error())
	}
	p := &darwinPlatform{sandboxExec: se}
	tmp, err := os.MkdirTemp("", "oma-sandbox-probe-")
	if err != nil {
		return fail("no directory for the self-test: " + err.Error())
	}
	defer safefs.RemoveAll(tmp)
	dirs := dirsOf(physical(tmp))
	for _, d := range []string{dirs.Box, dirs.Workspace, dirs.Uploads, dirs.Outputs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fail("no directory for the self-test: " + err.Error())
		}
	}
	if why := seatbeltSelfTest(ctx, p, dirs); why != "" {
		return fail(why)
	}
	caps.Backend = "seatbelt"
	caps.Filesystem = full("Seatbelt self-test: a write was allowed in workspace-write and denied in read-only")
	caps.Network = seatbeltNetwork(ctx, p, dirs)
	caps.Process = partial(groupOnly)
	caps.Limits[LimitWallTime], caps.Limits[LimitOutput] = partial(groupOnly), partial(groupOnly)
	caps.Resources = summarizeResources(caps.Limits)
	return caps, p
}

// probeCall runs a command the way a session would, under the given mode.
func probeCall(ctx context.Context, p *darwinPlatform, dirs hostDirs, mode Mode, argv ...string) (*session.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	l, err := p.launch(call{name: "probe", dirs: dirs, policy: Policy{Mode: mode, Network: NetworkDeny},
		env: []string{"PATH=" + guestPath}, workdir: dirs.Workspace, argv: argv})
	if err != nil {
		return nil, err
	}
	defer l.finish()
	return run(ctx, runSpec{cmd: l.cmd, marker: l.marker, maxOutput: 64 << 10})
}

// seatbeltSelfTest proves the profile both allows and denies: one write
// must succeed in workspace-write, one must fail in read-only.
func seatbeltSelfTest(ctx context.Context, p *darwinPlatform, dirs hostDirs) string {
	allowed, denied := filepath.Join(dirs.Workspace, "allowed"), filepath.Join(dirs.Workspace, "denied")
	if res, err := probeCall(ctx, p, dirs, ModeWorkspaceWrite, "/usr/bin/touch", allowed); err != nil || res.ExitCode != 0 || !exists(allowed) {
		return "Seatbelt self-test: a workspace-write command could not write its workspace"
	}
	if res, err := probeCall(ctx, p, dirs, ModeReadOnly, "/usr/bin/touch", denied); err != nil || res.ExitCode == 0 || exists(denied) {
		return "Seatbelt self-test: a read-only command wrote its workspace"
	}
	return ""
}

// seatbeltNetwork proves network denial: a loopback connection to a host
// listener must fail.
func seatbeltNetwork(ctx context.Context, p *darwinPlatform, dirs hostDirs) Control {
	if _, err := exec.LookPath("/usr/bin/nc"); err != nil {
		return none("network denial unproven: /usr/bin/nc not found")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return none("network denial unproven: " + err.Error())
	}
	defer ln.Close()
	accepted := make(chan bool, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err == nil
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	res, err := probeCall(ctx, p, dirs, ModeWorkspaceWrite, "/usr/bin/nc", "-z", "-G", "1", "127.0.0.1", port)
	ln.Close()
	if err != nil || res.ExitCode == 0 || <-accepted {
		return none("a sandboxed command reached a loopback listener")
	}
	return full("Seatbelt (deny network*): a loopback connection was refused")
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, os.ErrNotExist)
}
