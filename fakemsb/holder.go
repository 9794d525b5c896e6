//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// holder is the long-lived bwrap process that owns a running sandbox's
// namespaces. InitPID is the sandbox's pid 1 (bwrap's reaper); killing it
// makes the kernel kill every process of the sandbox's pid namespace.
type holder struct {
	OuterPID   int    `json:"outer_pid"`
	OuterStart uint64 `json:"outer_start"`
	InitPID    int    `json:"init_pid"`
	InitStart  uint64 `json:"init_start"`
	// The port forwarder, when the sandbox has -p mappings (ports.go).
	ForwarderPID   int    `json:"forwarder_pid,omitempty"`
	ForwarderStart uint64 `json:"forwarder_start,omitempty"`
}

// holderEnv is set to holderMarker in every holder (bwrap --setenv), so
// that the holders of one state directory can be found in the process
// table.
const holderEnv = "FAKEMSB_HOLDER"

func (a *app) holderMarker(name string) string { return a.home + "|" + name }

// readStat parses /proc/PID/stat: whether the process is live (not a
// zombie), its parent and its start time in clock ticks since boot.
func readStat(pid int) (ppid int, start uint64, live bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name may contain spaces and parentheses: parse after
	// the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	start, err = strconv.ParseUint(f[19], 10, 64)
	return ppid, start, err == nil
}

// procStart returns the start time of pid and whether it is live.
func procStart(pid int) (uint64, bool) {
	_, st, ok := readStat(pid)
	return st, ok
}

func (h *holder) alive() bool {
	if h == nil {
		return false
	}
	st, ok := procStart(h.InitPID)
	return ok && st == h.InitStart
}

// kill kills the sandbox's pid namespace and waits until its init and the
// outer bwrap are gone: the kernel kills every other member of the
// namespace before its init can exit, and the outer bwrap exits with it.
func (h *holder) kill() {
	if h == nil {
		return
	}
	if h.alive() {
		_ = syscall.Kill(h.InitPID, syscall.SIGKILL)
	}
	outerAlive := func() bool {
		st, ok := procStart(h.OuterPID)
		return ok && st == h.OuterStart
	}
	for deadline := time.Now().Add(10 * time.Second); (h.alive() || outerAlive()) && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
	h.stopForwarder()
}

// killHolders SIGKILLs every process started as, or inside, the holder
// marked marker: bwrap carries the marker in its argv and the sandbox's
// processes in their environment. It finds holders no record names.
func killHolders(marker string) {
	arg := []byte("\x00" + holderEnv + "\x00" + marker + "\x00")
	env := []byte(holderEnv + "=" + marker + "\x00")
	for _, p := range listProcs() {
		dir := "/proc/" + strconv.Itoa(p.pid)
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		environ, _ := os.ReadFile(dir + "/environ")
		if bytes.Contains(cmdline, arg) || bytes.HasPrefix(environ, env) || bytes.Contains(environ, append([]byte{0}, env...)) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}

type procInfo struct{ pid, ppid int }

func listProcs() []procInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := readStat(pid); ok {
			out = append(out, procInfo{pid: pid, ppid: ppid})
		}
	}
	return out
}

// hostRootLinks lists top-level host paths mirrored into every guest: the
// same symlink on a merged-/usr host, else a read-only bind.
var hostRootLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// remount is a mount flag change that bwrap cannot express, applied from
// the host inside the holder's mount namespace once bwrap is ready.
// imageDir reports whether fakemsb can give the guest root an image's
// workdir p: not the root and not beneath what it shares from the host.
func imageDir(p string) bool {
	if p == "" || p == "/" {
		return false
	}
	for _, host := range []string{"/usr", "/etc", "/bin", "/lib", "/lib64", "/sbin", "/proc", "/dev"} {
		if p == host || strings.HasPrefix(p, host+"/") {
			return false
		}
	}
	return true
}

type remount struct{ opts, path string }

// holderArgs builds the bwrap argv for sb, and the files it reads from
// descriptors 5 and up (after the info and ready pipes), which the caller
// closes once bwrap started.
func (a *app) holderArgs(sb *sandbox, st *state) (_ []string, _ []remount, _ []*os.File, err error) {
	var files []*os.File
	defer func() {
		if err != nil {
			closeAll(files)
		}
	}()
	args := []string{
		"--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--hostname", hostname(sb.Name),
	}
	if !sb.Network {
		args = append(args, "--unshare-net")
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--ro-bind", "/usr", "/usr")
	for _, p := range hostRootLinks {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, nil, nil, failf("io error: %v", err)
			}
			args = append(args, "--symlink", target, p)
		case fi.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	args = append(args,
		"--ro-bind", "/etc", "/etc",
		"--perms", "1777", "--tmpfs", "/tmp",
		"--perms", "1777", "--tmpfs", "/dev/shm",
		"--perms", "1777", "--dir", "/var/tmp",
		"--perms", "0700", "--dir", "/root",
		"--setenv", holderEnv, a.holderMarker(sb.Name),
	)
	if _, ok := sb.egressPolicy(); ok {
		// bwrap would create /run 0700, out of the guest user's reach.
		args = append(args, "--perms", "0755", "--dir", "/run", "--ro-bind", a.egressDir(sb.Name), guestEgressDir)
	}
	if w := sb.ImageConfig.Workdir; imageDir(w) {
		// The image has its workdir; its user may write there. A mount on
		// the same path, below, covers it.
		args = append(args, "--perms", "0777", "--dir", w)
	}
	patches, files, err := a.patchArgs(sb, 5)
	if err != nil {
		return nil, nil, nil, failf("io error: %v", err)
	}
	args = append(args, patches...)
	var remounts []remount
	for _, m := range sb.Mounts {
		v, ok := st.Volumes[m.Volume]
		if !ok {
			return nil, nil, nil, failf("volume not found: %s", m.Volume)
		}
		bind := "--bind"
		if m.Options.ReadOnly {
			bind = "--ro-bind"
		}
		args = append(args, bind, a.volumeDir(v.Name), m.Guest)
		if m.Options.NoExec {
			o := "remount,bind,noexec,nosuid,nodev"
			if m.Options.ReadOnly {
				o += ",ro"
			}
			remounts = append(remounts, remount{o, m.Guest})
		}
	}
	for _, t := range sb.Tmpfs {
		args = append(args, "--perms", "1777")
		if t.SizeMiB > 0 {
			args = append(args, "--size", strconv.FormatInt(int64(t.SizeMiB)<<20, 10))
		}
		args = append(args, "--tmpfs", t.Guest)
		if t.Options.ReadOnly {
			args = append(args, "--remount-ro", t.Guest)
		}
		if t.Options.NoExec {
			o := "remount,noexec,nosuid,nodev"
			if t.Options.ReadOnly {
				o += ",ro"
			}
			remounts = append(remounts, remount{o, t.Guest})
		}
	}
	// The idle process reports readiness on fd 4 once every mount is in
	// place, then sleeps; its stdio is /dev/null.
	args = append(args, "--chdir", "/", "--info-fd", "3", "--",
		"/bin/sh", "-c", `echo ready >&4; exec 3>&- 4>&-; exec sleep infinity`)
	return args, remounts, files, nil
}

func hostname(name string) string {
	if len(name) > 63 {
		return strings.TrimRight(name[:63], ".-")
	}
	return name
}

// startHolder brings up sb's holder and records it in sb.
func (a *app) startHolder(sb *sandbox, st *state) error {
	args, remounts, patches, err := a.holderArgs(sb, st)
	if err != nil {
		return err
	}
	defer closeAll(patches)
	for _, m := range sb.Mounts {
		if err := os.MkdirAll(a.volumeDir(m.Volume), 0o755); err != nil {
			return failf("io error: %v", err)
		}
	}
	if err := os.MkdirAll(a.runDir(), 0o755); err != nil {
		return failf("io error: %v", err)
	}
	if _, ok := sb.egressPolicy(); ok {
		if err := a.prepareEgress(sb); err != nil {
			return failf("io error: egress: %v", err)
		}
	}
	logPath := filepath.Join(a.runDir(), sb.Name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return failf("io error: %v", err)
	}
	defer logf.Close()
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return failf("io error: %v", err)
	}
	defer infoR.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		infoW.Close()
		return failf("io error: %v", err)
	}
	defer readyR.Close()

	cmd := exec.Command("bwrap", args...)
	cmd.Env = []string{"PATH=" + guestPATH}
	cmd.Stderr = logf
	cmd.ExtraFiles = append([]*os.File{infoW, readyW}, patches...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	infoW.Close()
	readyW.Close()
	if err != nil {
		return failf("failed to start %q: %v", sb.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	// bwrap reports the sandbox init's pid on the info fd; the idle process
	// then reports readiness once every mount is in place.
	var initPID atomic.Int64
	ready := make(chan error, 1)
	go func() {
		var info struct {
			ChildPID int `json:"child-pid"`
		}
		if err := json.NewDecoder(infoR).Decode(&info); err != nil {
			ready <- err
			return
		}
		initPID.Store(int64(info.ChildPID))
		line, err := bufio.NewReader(readyR).ReadString('\n')
		if err != nil || line != "ready\n" {
			err = fmt.Errorf("holder did not report readiness")
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(20 * time.Second):
		err = fmt.Errorf("timed out waiting for the holder")
	}
	fail := func(err error) error {
		// Without the outer bwrap the sandbox init would live on.
		if pid := int(initPID.Load()); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		<-exited
		if msg, _ := os.ReadFile(logPath); len(bytes.TrimSpace(msg)) > 0 {
			err = errors.New(string(bytes.TrimSpace(msg)))
		}
		return failf("failed to start %q: %v", sb.Name, err)
	}
	if err != nil {
		return fail(err)
	}
	startTicks, ok := procStart(int(initPID.Load()))
	if !ok {
		return fail(fmt.Errorf("holder exited"))
	}
	outerTicks, _ := procStart(cmd.Process.Pid)
	h := &holder{OuterPID: cmd.Process.Pid, OuterStart: outerTicks, InitPID: int(initPID.Load()), InitStart: startTicks}
	if len(remounts) > 0 {
		script := ""
		for _, r := range remounts {
			script += fmt.Sprintf("mount -o %s %s && ", r.opts, shellQuote(r.path))
		}
		out, err := exec.Command("nsenter", "-t", strconv.Itoa(h.InitPID), "-m", "--", "/bin/sh", "-c", script+"true").CombinedOutput()
		if err != nil {
			h.kill()
			return failf("failed to start %q: remount: %v %s", sb.Name, err, strings.TrimSpace(string(out)))
		}
	}
	if len(sb.Ports) > 0 {
		if err := a.startForwarder(sb, h, logf); err != nil {
			h.kill()
			return failf("failed to start %q\n  → %v", sb.Name, err)
		}
	}
	booted := sb.configured()
	sb.Holder, sb.Status, sb.Booted = h, statusRunning, &booted
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
