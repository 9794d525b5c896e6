//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// sandbox is one sandbox as kept in the state file.
type sandbox struct {
	Name      string            `json:"name"`
	Image     string            `json:"image"`
	Labels    map[string]string `json:"labels"`
	Mounts    []namedMount      `json:"mounts"`
	Tmpfs     []tmpfsMount      `json:"tmpfs"`
	CopyFiles []copyFile        `json:"copy_files,omitempty"`
	// RootFiles are files a snapshot it booted from had in its root disk:
	// in its guest like CopyFiles, but not part of its config.
	RootFiles    []copyFile `json:"root_files,omitempty"`
	CPUs         int        `json:"cpus"`
	MemoryMiB    int        `json:"memory_mib"`
	MaxCPUs      int        `json:"max_cpus,omitempty"`
	MaxMemoryMiB int        `json:"max_memory_mib,omitempty"`
	// Booted are the running guest's resources (nil when stopped): a
	// modify applies live only within their maximums.
	Booted            *resources    `json:"booted,omitempty"`
	RootDiskMiB       int           `json:"root_disk_mib,omitempty"`
	Workdir           string        `json:"workdir,omitempty"`
	ImageConfig       imageConfig   `json:"image_config"`
	Network           bool          `json:"network"`
	Ports             []portMapping `json:"ports,omitempty"`
	NetPolicy         *policyDoc    `json:"net_policy,omitempty"`
	Secrets           []secretSpec  `json:"secrets,omitempty"`
	OnSecretViolation string        `json:"on_secret_violation,omitempty"`
	Security          string        `json:"security"`
	Pull              string        `json:"pull"`
	MaxDurationSecs   *int64        `json:"max_duration_secs"`
	IdleTimeoutSecs   *int64        `json:"idle_timeout_secs"`
	CreatedAt         time.Time     `json:"created_at"`
	UpdatedAt         time.Time     `json:"updated_at"`
	Status            string        `json:"status"`
	Holder            *holder       `json:"holder,omitempty"`
	// TransientExecs counts exec/copy calls that started this sandbox from
	// Stopped; the last one to finish stops it again.
	TransientExecs int `json:"transient_execs,omitempty"`
}

// volume is one named volume; its data lives in volumeDir.
type volume struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	SizeMiB   int       `json:"size_mib,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

type state struct {
	Sandboxes map[string]*sandbox  `json:"sandboxes"`
	Volumes   map[string]*volume   `json:"volumes"`
	Snapshots map[string]*snapshot `json:"snapshots,omitempty"`
	// FaultSpec and FaultCounts count invocations per subcommand since
	// FAKEMSB_FAULTS last changed.
	FaultSpec   string         `json:"fault_spec,omitempty"`
	FaultCounts map[string]int `json:"fault_counts,omitempty"`
}

const (
	statusStarting = "Starting"
	statusRunning  = "Running"
	statusStopped  = "Stopped"
)

func (a *app) statePath() string            { return filepath.Join(a.home, "state.json") }
func (a *app) volumeDir(name string) string { return filepath.Join(a.home, "volumes", name) }
func (a *app) runDir() string               { return filepath.Join(a.home, "run") }

// withState runs fn on the state under an exclusive flock of the state
// directory and saves the state afterwards when fn succeeded. Guest
// commands never run inside fn.
func (a *app) withState(fn func(st *state) error) error {
	if err := os.MkdirAll(a.home, 0o755); err != nil {
		return failf("io error: %v", err)
	}
	lf, err := os.OpenFile(filepath.Join(a.home, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return failf("io error: %v", err)
	}
	defer lf.Close()
	if err := flock(lf, unix.LOCK_EX); err != nil {
		return failf("io error: lock state: %v", err)
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN)

	st := &state{}
	data, err := os.ReadFile(a.statePath())
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return failf("io error: %v", err)
	default:
		if err := json.Unmarshal(data, st); err != nil {
			return failf("database error: corrupt state %s: %v", a.statePath(), err)
		}
	}
	if st.Sandboxes == nil {
		st.Sandboxes = map[string]*sandbox{}
	}
	if st.Volumes == nil {
		st.Volumes = map[string]*volume{}
	}
	// A holder that died behind our back (killed, host restart) leaves a
	// sandbox that is no longer running.
	for _, sb := range st.Sandboxes {
		if sb.Status == statusRunning && !sb.Holder.alive() {
			sb.Holder.stopForwarder()
			sb.Status, sb.Holder, sb.Booted, sb.TransientExecs = statusStopped, nil, nil, 0
		}
		// Only a create holds the lock while its sandbox is Starting, so
		// one seen here was killed mid-start: end the holder it may have
		// left and keep the record as a stopped sandbox.
		if sb.Status == statusStarting {
			killHolders(a.holderMarker(sb.Name))
			sb.Status, sb.Holder, sb.TransientExecs = statusStopped, nil, 0
		}
	}
	if err := fn(st); err != nil {
		return err
	}
	return a.writeState(st, data)
}

// writeState saves st unless it still reads as prev.
func (a *app) writeState(st *state, prev []byte) error {
	out, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return failf("json error: %v", err)
	}
	if bytes.Equal(out, prev) {
		return nil
	}
	tmp := a.statePath() + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return failf("io error: %v", err)
	}
	if err := os.Rename(tmp, a.statePath()); err != nil {
		return failf("io error: %v", err)
	}
	return nil
}

// flock retries on EINTR, which Go's runtime signals can cause.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

func (st *state) get(name string) (*sandbox, error) {
	sb, ok := st.Sandboxes[name]
	if !ok {
		return nil, failf("sandbox not found: %s", name)
	}
	return sb, nil
}

// fmtTime is msb's JSON timestamp: RFC 3339 UTC with +00:00 and the
// fraction as chrono prints it: none, 3, 6 or 9 digits, the fewest that
// hold the nanoseconds.
func fmtTime(t time.Time) string {
	t = t.UTC()
	ns := t.Nanosecond()
	frac := ""
	switch {
	case ns == 0:
	case ns%1e6 == 0:
		frac = fmt.Sprintf(".%03d", ns/1e6)
	case ns%1e3 == 0:
		frac = fmt.Sprintf(".%06d", ns/1e3)
	default:
		frac = fmt.Sprintf(".%09d", ns)
	}
	return t.Format("2006-01-02T15:04:05") + frac + "+00:00"
}
