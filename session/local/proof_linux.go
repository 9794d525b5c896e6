package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// hostFacts are what a probe's results depend on beyond the sandbox it
// runs; a proof holds only while all of them are unchanged.
type hostFacts struct {
	BootID   string            `json:"boot_id"`
	EUID     int               `json:"euid"`
	Files    []fileID          `json:"files"` // this program and the tools a sandbox runs
	Landlock int               `json:"landlock"`
	System   string            `json:"system"`
	Sysctls  map[string]string `json:"sysctls"`
	Cgroups  string            `json:"cgroups"`
	Limits   Limits            `json:"limits"`
}

type fileID struct {
	Path  string `json:"path"`
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime_ns"`
	Ctime int64  `json:"ctime_ns"`
	Mode  uint32 `json:"mode"`
}

// factSysctls decide whether bubblewrap gets its namespaces and whether a
// command can trace the sandbox's init.
var factSysctls = []string{
	"kernel/random/boot_id", // read into BootID
	"kernel/unprivileged_userns_clone",
	"user/max_user_namespaces",
	"kernel/apparmor_restrict_unprivileged_userns",
	"kernel/yama/ptrace_scope",
}

// knownPlatform builds the platform a probe of req would, running no
// sandbox, and the facts a proof for it must match; nil when a tool is
// missing or a fact cannot be read (then only a probe tells).
func knownPlatform(req probeRequest) (platform, []byte) {
	if req.all {
		return nil, nil
	}
	p, _ := newLinuxPlatform(req)
	if p == nil {
		return nil, nil
	}
	// Afresh: a kept proof must not hold once the layout has changed.
	p.cgroups = readCgroups()
	if pl, err := exec.LookPath("prlimit"); err == nil {
		p.prlimit = pl
	}
	f := hostFacts{EUID: os.Geteuid(), Landlock: p.landlock, System: fmt.Sprint(p.system),
		Sysctls: map[string]string{}, Cgroups: fmt.Sprint(p.cgroups), Limits: req.limits}
	for _, name := range factSysctls {
		v, err := os.ReadFile("/proc/sys/" + name)
		if err != nil && name == factSysctls[0] {
			return nil, nil
		}
		f.Sysctls[name] = strings.TrimSpace(string(v))
	}
	f.BootID = f.Sysctls[factSysctls[0]]
	delete(f.Sysctls, factSysctls[0])
	self, err := os.Executable()
	if err != nil {
		return nil, nil
	}
	for _, path := range []string{self, p.bwrap, p.setpriv, p.prlimit} {
		if path == "" {
			continue
		}
		id, err := idOf(path)
		if err != nil {
			return nil, nil
		}
		f.Files = append(f.Files, id)
	}
	data, err := json.Marshal(f)
	if err != nil {
		return nil, nil
	}
	return p, data
}

func idOf(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileID{Path: path, Dev: st.Dev, Ino: st.Ino, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Mode: st.Mode}, nil
}

// openOwned opens path, not following a final symlink, when it is a
// regular file of this user's that no one else may write.
func openOwned(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		unix.Close(fd)
		return nil, errNotOwned
	}
	return os.NewFile(uintptr(fd), path), nil
}

// privateStateDir refuses a state directory another user may write in
// (owned by another user than this one or root, or writable by its group
// or by all, sticky or not): they could put a directory of theirs under a
// session's name, or in the place of one, whose links the host would
// write through. A missing directory is no refusal.
func privateStateDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("local sandbox: state directory %s: %w", dir, err)
	}
	refuse := func(reason string) error {
		return &PolicyError{Field: "state directory", Value: dir, Reason: reason}
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFDIR:
		return refuse("not a directory")
	case int(st.Uid) != os.Geteuid() && st.Uid != 0:
		return refuse(fmt.Sprintf("owned by uid %d, not this user (uid %d) or root", st.Uid, os.Geteuid()))
	case st.Mode&0o022 != 0:
		return refuse(fmt.Sprintf("writable by other users (mode %04o); chmod go-w it", st.Mode&0o7777))
	}
	return nil
}
