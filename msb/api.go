// Package msb is the only package that knows the argv of microsandbox's msb
// CLI. It builds typed, validated argv for each subcommand the project uses,
// runs msb with a scrubbed environment, bounded output and process-group
// kill semantics, and parses msb's JSON listings and error messages.
//
// Every builder validates its input before any process starts and refuses
// with a *ValidationError (matching ErrInvalid). Failures of msb itself come
// back as *ExitError, classified from msb's "error: ..." line so callers can
// test them with errors.Is against the sentinels below.
package msb

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	ErrInvalid          = errors.New("invalid msb argument")    // a ValidationError; nothing was started
	ErrSandboxNotFound  = errors.New("sandbox not found")       // error: sandbox not found: NAME
	ErrVolumeNotFound   = errors.New("volume not found")        // error: volume not found: NAME
	ErrSnapshotNotFound = errors.New("snapshot not found")      // error: snapshot not found: $MSB_HOME/snapshots/NAME
	ErrAlreadyExists    = errors.New("already exists")          // sandbox or volume already exists
	ErrVolumeAttached   = errors.New("volume attached")         // volume remove refused: attached to active sandbox
	ErrExecTimedOut     = errors.New("exec timed out")          // exec --timeout fired in the guest
	ErrCannotStart      = errors.New("command could not start") // exec 126/127 with "failed to exec"
	ErrStartFailed      = errors.New("sandbox failed to start") // create/start: error: failed to start "NAME"
	ErrImageNotCached   = errors.New("image not cached")        // image not cached (create --pull never) or not found (image inspect)
	ErrNoMetrics        = errors.New("no metrics recorded")     // metrics of a sandbox that has not run since it was made or started
	ErrRestartRequired  = errors.New("change needs a restart")  // modify of a running sandbox beyond what it booted with
	ErrStillRunning     = errors.New("sandbox still running")   // start of a running sandbox, remove of one without --force
	ErrOutputOverflow   = errors.New("msb output exceeds cap")  // the runner's cap was hit; process group killed
	// ErrInstallInProgress: msb refuses every command while its install
	// lease is held (ExitError.RetryAt says until when). An msb killed
	// while opening its database can leave the lease for 30 minutes.
	ErrInstallInProgress = errors.New("msb install operation in progress")
	ErrHostTimeout       = errors.New("msb host deadline exceeded")
	ErrAborted           = errors.New("msb call aborted")
)

// ValidationError reports an argument refused before any process started.
// It matches ErrInvalid.
type ValidationError struct {
	Field  string // e.g. "name", "label key", "memory"
	Value  string
	Reason string
}

// ExitError reports a non-zero exit of msb. Kind is one of the sentinel
// errors above when stderr carried a recognised msb message, else nil (a
// guest's own non-zero exit code from exec).
type ExitError struct {
	Args     []string
	ExitCode int
	Message  string // msb's "error: ..." line without the prefix and its "→" hint lines joined by " → ", ANSI stripped; "" if none
	Stderr   []byte // captured stderr (bounded), ANSI stripped
	Kind     error
	RetryAt  time.Time // with ErrInstallInProgress: when msb's install lease expires (UTC); else zero
}

// Call is one msb invocation.
type Call struct {
	Args []string
	// Stdin is read to EOF and closed; nil means /dev/null. Without exec
	// --stream, msb may read it to EOF before starting the guest command
	// (0.6.14 does), so give it a finite stdin there; with --stream, msb
	// 0.6.18 forwards it while the command runs.
	Stdin io.Reader
	// Stdout and Stderr, when set, receive each chunk as it arrives, and that
	// stream is then not buffered in Result (stderr is still kept, bounded, for
	// error classification).
	Stdout func([]byte)
	Stderr func([]byte)
	// MaxOutput caps stdout+stderr bytes; 0 means the runner's default.
	MaxOutput int64
	// Env is added to msb's environment for this call only (after CLI.Env);
	// it carries secret values, so it is never logged.
	Env []string
}

// Result is what one msb invocation produced.
type Result struct {
	Args     []string
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// Runner runs msb invocations. *CLI is the real one; tests may swap it.
type Runner interface {
	Run(ctx context.Context, c Call) (*Result, error)
}

// CLI runs the msb binary.
type CLI struct {
	// Path of the msb binary; "" means $OMA_MSB, else "msb" on PATH.
	Path string
	// Env is added verbatim to the child's environment. The host's environment
	// contributes only HOME, PATH, TEMP, TMP, TMPDIR and msb's own MSB_*
	// variables (see hostEnvKeys); NO_COLOR=1 is always set.
	Env []string
	// MaxOutput caps stdout+stderr per call; 0 means DefaultMaxOutput.
	MaxOutput int64
	// WaitDelay bounds the wait for output pipes after msb exited or its
	// process group was killed, since a leftover background process may
	// still hold them; 0 means DefaultWaitDelay.
	WaitDelay time.Duration
	Logger    *slog.Logger
}

// DefaultMaxOutput is the per-call output cap when none is configured.
const DefaultMaxOutput = 16 << 20

// Label is one KEY=VALUE sandbox label.
type Label struct{ Key, Value string }

// NamedMount is --mount-named VOLUME:GUEST[:OPTIONS].
type NamedMount struct {
	Volume  string
	Guest   string
	Options []string // ro rw noexec nosuid nodev kind=dir|disk size= quota=
}

// Tmpfs is --tmpfs PATH[:SIZE][:OPTIONS].
type Tmpfs struct {
	Path    string
	Size    string   // msb size, e.g. "64M"; "" for msb's default
	Options []string // ro rw noexec nosuid nodev size=
}

// CreateOptions are the flags of `msb create IMAGE`.
type CreateOptions struct {
	// Image is required unless Conf names the root filesystem.
	Image string
	// Conf is an msb sparse config file (--conf, an absolute host path);
	// flags override what it says. WriteSnapshotConf writes one that boots
	// the sandbox from a snapshot, as msb 0.6.18's create has no
	// --from-snapshot flag.
	Conf   string
	Name   string
	Mounts []NamedMount
	Tmpfs  []Tmpfs
	// CopyFiles are placed in the guest rootfs before boot (--copy-file).
	CopyFiles []CopyFile
	Workdir   string
	// NoNet denies all traffic that no NetRules entry allows (both
	// directions); without rules the guest has no network.
	NoNet bool
	// NetDefaultEgress is "", "allow" or "deny": the egress default alone.
	NetDefaultEgress string
	NetRules         []NetRule
	// Secrets are host variables msb reads when the sandbox starts and
	// sends only to their hosts; Client.Create passes their values to msb.
	Secrets           []SecretRef
	OnSecretViolation string // "", "block", "block-and-log", "block-and-terminate" or "passthrough"
	CPUs              int    // 0: msb default
	Memory            string // msb size
	RootDisk          string // msb size (--root-disk)
	MaxDuration       string // msb duration
	IdleTimeout       string // msb duration
	Security          string // "", "default" or "restricted"
	Pull              string // "", "always", "if-missing" or "never"
	Quiet             bool
	Labels            []Label
	Replace           bool
	// Ports are forwarded from the host into the guest. msb filters them
	// through the ingress policy, which --no-net sets to deny: such a
	// sandbox needs an ingress NetRule per guest port.
	Ports []PortForward
}

// CopyFile is --copy-file SRC:DST: msb copies the host file Src into the
// guest rootfs at Dst before the sandbox boots, with Src's permission bits,
// creating missing parent directories; it refuses to replace a file the
// image already has. The copy is made once: later changes to Src are not
// seen by the guest.
type CopyFile struct {
	Src string // absolute host path of a regular file
	Dst string // absolute guest path
}

// NetRule is one --net-rule token ACTION[:DIRECTION]@TARGET[:PROTOCOL[:PORTS]].
// For an ingress rule the target is the peer and the ports are the guest's.
type NetRule struct {
	Action    string // "allow" or "deny"
	Direction string // "" (egress, msb's default), "egress", "ingress" or "any"
	Target    string // IPv4, [IPv6], CIDR, [IPv6 CIDR], domain, *.suffix
	Protocol  string // "", "any", "tcp", "udp", "icmpv4" or "icmpv6"
	Ports     string // "", "any", PORT or LO-HI; needs Protocol
}

// SecretRef is one --secret ENV@HOST[,HOST...].
type SecretRef struct {
	Env   string
	Hosts []string
}

// ModifyOptions are the flags of `msb modify NAME` that oma-sandbox uses.
// Without NextStart or Restart msb applies a change to a running sandbox
// live when the booted VM has room for it and otherwise refuses it
// (ErrRestartRequired); a stopped sandbox takes it at its next start.
type ModifyOptions struct {
	Name      string
	CPUs      int    // 0: unchanged
	Memory    string // msb size; "": unchanged
	NextStart bool   // save for the next start, never touch a running VM
	Restart   bool   // restart the sandbox if a change needs it
}

// ExecOptions are the flags of `msb exec NAME -- ARGV...`.
type ExecOptions struct {
	Name    string
	Argv    []string
	Stream  bool
	User    string
	Timeout string // msb duration
	Workdir string
	Env     []string // KEY=VALUE
}

// Streams carries an exec's stdin and streaming callbacks.
type Streams struct {
	Stdin          io.Reader
	Stdout, Stderr func([]byte)
	MaxOutput      int64
}

// StopOptions are the flags of `msb stop`.
type StopOptions struct {
	Names   []string
	Force   bool
	Timeout int // seconds; 0: msb default
}

// RemoveOptions are the flags of `msb remove`.
type RemoveOptions struct {
	Names []string
	Force bool
}

// ListOptions are the flags of `msb list --format json`.
type ListOptions struct {
	Labels  []Label // all must match
	Running bool
	Stopped bool
}

// VolumeCreateOptions are the flags of `msb volume create`.
type VolumeCreateOptions struct {
	Name string
	Kind string // "", "dir" or "disk"
	Size string // disk only
}

// Stopped reports whether a sandbox in this status (msb's Status field of
// list and inspect) runs nothing, and a start is what brings it back:
// Stopped or Crashed.
func Stopped(status string) bool { return status == "Stopped" || status == "Crashed" }

// Sandbox is one entry of `msb list --format json`.
type Sandbox struct {
	Name      string
	Image     string
	Status    string
	CreatedAt time.Time
}

// SandboxInfo is the part of `msb inspect NAME --format json` the project uses.
type SandboxInfo struct {
	Name      string
	Status    string
	Image     string
	CreatedAt time.Time
	Labels    map[string]string
	Mounts    []MountInfo
	CPUs      int
	MemoryMiB int
	Workdir   string
	// User is the user commands run as when exec names none (the image's,
	// config.runtime.user); "" when msb shows none.
	User    string
	Network bool
	// UpdatedAt is when msb last changed the record: every status change
	// (start, stop, a crash, an idle or max-duration stop) and every
	// applied modify; zero when msb shows none. A guest cannot move it.
	UpdatedAt time.Time
	Ports     []PortForward
	// CopyFiles are the guest destinations of create's --copy-file patches.
	CopyFiles []string
	// IdleTimeout is create's --idle-timeout; 0 when none was set.
	IdleTimeout time.Duration
}

// MountInfo is one mount of an inspected sandbox.
type MountInfo struct {
	Type     string // "Named", "Tmpfs", ...
	Name     string // volume name for Named mounts
	Guest    string
	SizeMiB  int
	ReadOnly bool
}

// Volume is one entry of `msb volume list --format json`.
type Volume struct {
	Name      string
	Kind      string
	UsedBytes int64
	CreatedAt time.Time
}

// Snapshot is one entry of `msb snapshot list --format json`. msb lists
// no labels there; an unnamed snapshot (one made with a path) has Name "".
type Snapshot struct {
	Name      string
	Digest    string
	ImageRef  string
	CreatedAt time.Time
}

// SnapshotCreateOptions are the flags of `msb snapshot create NAME --from
// SANDBOX`; the sandbox must be stopped.
type SnapshotCreateOptions struct {
	Name   string
	From   string
	Labels []Label
	Quiet  bool
}

// Client has one method per msb subcommand. Runner defaults to &CLI{}.
type Client struct {
	Runner Runner
}
