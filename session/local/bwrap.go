//go:build linux

package local

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Guest paths on Linux: the session's host directories are bound here, so
// commands see the same layout as in the msb image.
const (
	guestWorkspace = "/workspace"
	guestUploads   = "/mnt/session/uploads"
	guestOutputs   = "/mnt/session/outputs"
	guestSkills    = "/workspace/skills"
)

// tmpSize bounds the private /tmp; TMPDIR points at the workspace anyway.
const tmpSize = 64 << 20

// hostEntry is one top-level host path as it exists: a directory to bind
// or a symlink to recreate (merged /usr hosts link /bin to usr/bin).
type hostEntry struct {
	Path   string
	Target string // symlink target; "" for a directory
}

// bwrapSpec is everything one bubblewrap invocation depends on. Building
// argv from it touches nothing on the host.
type bwrapSpec struct {
	Mode      Mode
	Network   Network
	Workspace string // host directories
	Uploads   string
	Outputs   string
	Workdir   string // guest path
	Env       []string
	// Privileged is set when bwrap runs as host root: it then builds the
	// namespaces without a user namespace and setpriv drops the command to
	// the guest user, so the command is host uid 65534 and owns nothing of
	// the host's.
	Privileged bool
	Setpriv    string // host path of setpriv (bound in through /usr)
	// Root runs the command as root inside the sandbox, for preparing
	// uploads and skills: uid 0 with only CAP_CHOWN, CAP_DAC_OVERRIDE and
	// CAP_FOWNER when Privileged, else uid 0 of the user namespace.
	Root bool
	// Resident is a session's long-lived sandbox (see resident.go), which
	// outlives the process that starts it: its command, the guest agent,
	// keeps only what it needs to start itself again in a user namespace
	// of its own (oma-guest-agent serve --userns) when Privileged, else
	// to start its commands' namespaces (serve --commands-pidns).
	Resident bool
	System   []hostEntry // /bin, /lib, ... (or all of / in danger mode)
	// SeccompFD is the descriptor bwrap reads the seccomp filter from; 0
	// means none.
	SeccompFD int
	// Agent, when set, is the host path of the guest agent, bound
	// read-only at agentGuestPath.
	Agent string
	// Egress, when set, binds the egress proxy's socket and the relay in.
	Egress  *egressMounts
	Command []string
}

// runtimeDirs are the top-level paths a command needs besides /usr and /etc.
var runtimeDirs = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// hostEntries reports how names exist at the top of the host filesystem.
func hostEntries(names []string) []hostEntry {
	var out []hostEntry
	for _, p := range names {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(p); err == nil {
				out = append(out, hostEntry{Path: p, Target: t})
			}
		case fi.IsDir():
			out = append(out, hostEntry{Path: p})
		}
	}
	return out
}

// dangerEntries lists the host's top level for danger-full-access, minus
// what the sandbox replaces with its own mounts.
func dangerEntries() []hostEntry {
	ents, err := os.ReadDir("/")
	if err != nil {
		return nil
	}
	skip := map[string]bool{"proc": true, "dev": true, "mnt": true, "workspace": true}
	var names []string
	for _, e := range ents {
		if !skip[e.Name()] {
			names = append(names, "/"+e.Name())
		}
	}
	sort.Strings(names)
	return hostEntries(names)
}

func (s bwrapSpec) args() []string {
	a := []string{"--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "oma-sandbox"}
	if !s.Resident {
		// A call's sandbox ends with the call's host process; a resident
		// one is the session's, ended by whichever process ends it.
		a = append([]string{"--die-with-parent"}, a...)
	}
	if s.Network != NetworkUnrestricted && s.Mode != ModeDangerFullAccess {
		a = append(a, "--unshare-net")
	}
	switch {
	case !s.Privileged:
		uid := strconv.Itoa(guestUID)
		if s.Root {
			uid = "0"
		}
		a = append(a, "--unshare-user", "--disable-userns", "--uid", uid, "--gid", uid)
		if s.Resident {
			// What the agent needs to give the commands namespaces of
			// their own (serve --commands-pidns), in the sandbox's user
			// namespace only; it drops them before it serves.
			a = append(a, "--cap-drop", "ALL")
			for _, c := range residentUnprivilegedCaps {
				a = append(a, "--cap-add", c)
			}
		}
	case s.Resident:
		a = append(a, "--cap-drop", "ALL")
		for _, c := range residentCaps {
			a = append(a, "--cap-add", c)
		}
	case s.Root:
		a = append(a, "--cap-drop", "ALL", "--cap-add", "CAP_CHOWN", "--cap-add", "CAP_DAC_OVERRIDE", "--cap-add", "CAP_FOWNER")
	default:
		// Only what setpriv needs to become the guest user and drop the rest.
		a = append(a, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP")
	}
	a = append(a, "--clearenv", "--tmpfs", "/")
	if s.Mode == ModeDangerFullAccess {
		for _, e := range s.System {
			if e.Target != "" {
				a = append(a, "--symlink", e.Target, e.Path)
			} else {
				a = append(a, "--bind", e.Path, e.Path)
			}
		}
		a = append(a, "--dev-bind", "/dev", "/dev", "--proc", "/proc")
	} else {
		a = append(a, "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc")
		for _, e := range s.System {
			if e.Target != "" {
				a = append(a, "--symlink", e.Target, e.Path)
			} else {
				a = append(a, "--ro-bind", e.Path, e.Path)
			}
		}
		a = append(a, "--proc", "/proc", "--dev", "/dev",
			"--perms", "1777", "--size", strconv.Itoa(tmpSize), "--tmpfs", "/tmp")
	}
	ws, out, up := "--bind", "--bind", "--ro-bind"
	if s.Mode == ModeReadOnly {
		ws, out = "--ro-bind", "--ro-bind"
	}
	if s.Root {
		// Preparing uploads and skills writes where the agent may not.
		ws, out, up = "--bind", "--bind", "--bind"
	}
	// bwrap would create the parents of a bind target 0700.
	a = append(a, "--dir", "/mnt", "--dir", "/mnt/session",
		ws, s.Workspace, guestWorkspace, up, s.Uploads, guestUploads, out, s.Outputs, guestOutputs)
	if s.Agent != "" {
		a = append(a, "--dir", "/.oma-sandbox", "--ro-bind", s.Agent, agentGuestPath)
	}
	if s.Egress != nil {
		a = append(a, s.Egress.args()...)
	}
	// Nothing may write the root tmpfs: it would be memory without a bound.
	a = append(a, "--remount-ro", "/")
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	if s.SeccompFD > 0 {
		a = append(a, "--seccomp", strconv.Itoa(s.SeccompFD))
	}
	a = append(a, "--chdir", s.Workdir, "--")
	if s.Privileged && !s.Root && !s.Resident {
		id := strconv.Itoa(guestUID)
		a = append(a, s.Setpriv, "--reuid="+id, "--regid="+id, "--clear-groups",
			"--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--")
	}
	return append(a, s.Command...)
}

// insideUsr reports whether a host executable really lies under /usr,
// which every sandbox binds at the same path.
func insideUsr(path string) bool {
	real, err := filepath.EvalSymlinks(path)
	return err == nil && within(real, "/usr")
}
