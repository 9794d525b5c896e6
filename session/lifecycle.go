package session

import (
	"context"
	"errors"
	"time"
)

// ErrPaused reports a call on a paused session whose caller asked not to
// resume it on use (Options.NoAutoResume, SetAutoResume(false)). Nothing
// ran; Resume and try again.
var ErrPaused = errors.New("session is paused")

// Lifecycle is what both backends offer beyond Session: pausing a session
// that waits (for a person, for hours) and reporting what it uses.
type Lifecycle interface {
	// Pause frees what the session holds between calls and keeps its
	// workspace. It waits for calls in flight. Idempotent.
	Pause(ctx context.Context) error
	// Resume makes a paused session ready again. Idempotent.
	Resume(ctx context.Context) error
	// Stats reports what the session uses now.
	Stats(ctx context.Context) (*Stats, error)
}

// Resize changes a session's CPUs or memory (Resizer).
type Resize struct {
	CPUs   int    // 0: unchanged
	Memory string // such as "512M" or "2G"; "": unchanged
	// Restart lets msb restart a running sandbox whose change exceeds what
	// it booted with: its processes end, its workspace stays. NextStart
	// instead saves the change for the next start (a resume). Without
	// either such a change fails and nothing changes. msb only.
	Restart   bool
	NextStart bool
}

// Resizer is a session whose CPUs and memory can change after create.
type Resizer interface {
	Resize(ctx context.Context, r Resize) error
}

// Session states Stats reports.
const (
	StateRunning = "running"
	StatePaused  = "paused"
	// StateIdle is a local session of which nothing runs: no call, no
	// sandbox (before its first call, or once its sandbox ended).
	StateIdle = "idle"
)

// Stats is a session's use as its backend reports it. A nil field is one
// the backend does not report (or not in this state); counters are totals
// since the sandbox last started.
type Stats struct {
	Backend string `json:"backend"` // "msb" or "local"
	State   string `json:"state"`   // StateRunning, StatePaused or StateIdle
	// Sampled is when the backend measured the numbers below.
	Sampled time.Time `json:"sampled"`

	CPUs       *int     `json:"cpus,omitempty"`
	CPUPercent *float64 `json:"cpu_percent,omitempty"` // of one CPU

	MemoryBytes      *int64 `json:"memory_bytes,omitempty"`
	MemoryLimitBytes *int64 `json:"memory_limit_bytes,omitempty"`

	// DiskUsedBytes is the workspace's use (msb: its volume; local: the
	// regular files of its workspace, uploads and outputs).
	DiskUsedBytes  *int64 `json:"disk_used_bytes,omitempty"`
	RootDiskBytes  *int64 `json:"root_disk_used_bytes,omitempty"` // msb: the root disk's writable layer
	DiskReadBytes  *int64 `json:"disk_read_bytes,omitempty"`
	DiskWriteBytes *int64 `json:"disk_write_bytes,omitempty"`
	NetRxBytes     *int64 `json:"net_rx_bytes,omitempty"`
	NetTxBytes     *int64 `json:"net_tx_bytes,omitempty"`

	Uptime *time.Duration `json:"uptime_ns,omitempty"`
}
