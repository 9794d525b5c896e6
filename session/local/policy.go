package local

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/oma-sandbox/oma-sandbox/egress"
)

// Mode is the filesystem reach of a session.
type Mode string

const (
	// ModeReadOnly binds every session directory read-only.
	ModeReadOnly Mode = "read-only"
	// ModeWorkspaceWrite lets commands write the workspace and outputs only.
	ModeWorkspaceWrite Mode = "workspace-write"
	// ModeDangerFullAccess shares the host filesystem and network with the
	// commands. It needs Policy.AllowDangerous and emits audit events.
	ModeDangerFullAccess Mode = "danger-full-access"
)

// ParseMode parses a mode name as the CLI spells it.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeReadOnly, ModeWorkspaceWrite, ModeDangerFullAccess:
		return m, nil
	}
	return "", &PolicyError{Field: "mode", Value: s, Reason: "want read-only, workspace-write or danger-full-access"}
}

// Network is the network reach of a session.
type Network string

const (
	// NetworkDeny gives commands a network namespace with loopback only.
	NetworkDeny Network = "deny"
	// NetworkUnrestricted shares the host's network.
	NetworkUnrestricted Network = "unrestricted"
	// NetworkAllowlist lets commands reach Policy.Allow only, through a
	// host-side filtering proxy (Linux; elsewhere refused rather than
	// widened to unrestricted).
	NetworkAllowlist Network = "allowlist"
)

// ParseNetwork parses a network mode name.
func ParseNetwork(s string) (Network, error) {
	switch n := Network(s); n {
	case NetworkDeny, NetworkUnrestricted, NetworkAllowlist:
		return n, nil
	}
	return "", &PolicyError{Field: "network", Value: s, Reason: "want deny, unrestricted or allowlist"}
}

// Policy is what a session's commands may reach.
type Policy struct {
	// Mode defaults to workspace-write, which the agent tools need.
	Mode Mode `json:"mode"`
	// Network defaults to deny.
	Network Network `json:"network"`
	// Allow is what an allowlist lets commands reach.
	Allow []egress.Target `json:"allow,omitempty"`
	// Secrets (allowlist only, Linux) are host variables whose values the
	// egress proxy puts in place of their placeholders, which is all the
	// commands see, in plain HTTP requests to their hosts.
	Secrets []egress.Secret `json:"secrets,omitempty"`
	// AllowDangerous must be set for danger-full-access.
	AllowDangerous bool `json:"allow_dangerous,omitempty"`
	// Require raises the evidence a control must have; see Requirements.
	Require Requirements `json:"require,omitzero"`
}

// Requirements are the least evidence a session needs per control. An
// empty field means the default: filesystem full (none in danger mode),
// network full under deny (none otherwise), process partial (the call's
// process group is killed; full adds a pid namespace, so detached
// descendants die too). Limits always need full evidence, except
// wall-time and output, which need what Process needs.
type Requirements struct {
	Filesystem Evidence `json:"filesystem,omitempty"`
	Network    Evidence `json:"network,omitempty"`
	Process    Evidence `json:"process,omitempty"`
}

func (p Policy) withDefaults() Policy {
	if p.Mode == "" {
		p.Mode = ModeWorkspaceWrite
	}
	if p.Network == "" {
		p.Network = NetworkDeny
	}
	return p
}

func (p Policy) validate() error {
	if _, err := ParseMode(string(p.Mode)); err != nil {
		return err
	}
	if _, err := ParseNetwork(string(p.Network)); err != nil {
		return err
	}
	for name, e := range map[string]Evidence{"filesystem": p.Require.Filesystem, "network": p.Require.Network, "process": p.Require.Process} {
		if e != "" && rank(e) < 0 {
			return &PolicyError{Field: "required " + name + " evidence", Value: string(e), Reason: "want none, partial or full"}
		}
	}
	if p.Mode == ModeDangerFullAccess && !p.AllowDangerous {
		return &PolicyError{Field: "mode", Value: string(p.Mode), Reason: "needs AllowDangerous"}
	}
	return p.validateEgress()
}

// Limits bound the commands a session runs. Wall time, output and file
// size bound each Shell call on its own; memory and CPU bound the session's
// resident sandbox, everything in it together, as a VM's size does, and
// a call in a sandbox of its own (root's; every call under a process
// limit) on its own. The zero value of a field means "no limit";
// negative values are refused.
type Limits struct {
	WallTime    time.Duration `json:"wall_time,omitempty"`    // kills the command, reported as a guest timeout
	OutputBytes int64         `json:"output_bytes,omitempty"` // stdout+stderr; 0 means the Shell default (16 MiB)
	MemoryBytes int64         `json:"memory_bytes,omitempty"` // cgroup memory limit; the kernel OOM-kills inside
	Processes   int64         `json:"processes,omitempty"`    // cgroup pids limit, counting the sandbox's own 2 processes
	CPUQuota    time.Duration `json:"cpu_quota,omitempty"`    // CPU time per CPUPeriod (cgroup CPU bandwidth)
	CPUPeriod   time.Duration `json:"cpu_period,omitempty"`   // defaults to 100ms when CPUQuota is set
	FileSize    int64         `json:"file_size,omitempty"`    // RLIMIT_FSIZE; larger writes fail with SIGXFSZ
}

// Limit keys accepted by ParseLimits and Limits.Set.
const (
	LimitWallTime  = "wall-time"
	LimitOutput    = "output"
	LimitMemory    = "memory"
	LimitProcesses = "processes"
	LimitCPU       = "cpu"
	LimitFileSize  = "file-size"
)

const (
	defaultCPUPeriod = 100 * time.Millisecond
	minMemoryBytes   = 8 << 20 // below this the sandbox itself cannot start
)

// ParseLimits parses `KEY=VALUE` specs as given to the CLI's --limit flag.
// A key may appear once. Keys and values:
//
//	wall-time=30s        Go duration (ms, s, m, h); at least 1ms
//	output=16M           bytes
//	memory=64M           bytes; at least 8M
//	processes=64         positive integer
//	cpu=0.5              CPUs as a decimal (quota over a 100ms period), or
//	cpu=50ms/100ms       explicit QUOTA/PERIOD durations (period 1ms..1s)
//	file-size=10M        bytes
//
// Byte values are a positive integer with an optional binary unit:
// B, K/KiB, M/MiB, G/GiB, T/TiB (case-insensitive; K = 1024). Decimal
// units such as MB are refused as ambiguous. Zero, negative, fractional
// or overflowing values and unknown keys are refused with a *PolicyError.
func ParseLimits(specs ...string) (Limits, error) {
	var l Limits
	seen := map[string]bool{}
	for _, spec := range specs {
		key, _, _ := strings.Cut(spec, "=")
		if seen[key] {
			return Limits{}, &PolicyError{Field: "limit", Value: spec, Reason: "key given twice"}
		}
		if err := l.Set(spec); err != nil {
			return Limits{}, err
		}
		seen[key] = true
	}
	return l, nil
}

// Set parses one `KEY=VALUE` spec into l, so Limits can serve as a
// flag.Value for a repeated --limit flag.
func (l *Limits) Set(spec string) error {
	key, value, ok := strings.Cut(spec, "=")
	if !ok || key == "" || value == "" {
		return &PolicyError{Field: "limit", Value: spec, Reason: "want KEY=VALUE"}
	}
	bad := func(reason string) error {
		return &PolicyError{Field: "limit " + key, Value: value, Reason: reason}
	}
	switch key {
	case LimitWallTime:
		d, err := time.ParseDuration(value)
		if err != nil || d < time.Millisecond {
			return bad("want a duration of at least 1ms, such as 30s or 5m")
		}
		l.WallTime = d
	case LimitOutput, LimitMemory, LimitFileSize:
		n, err := parseBytes(value)
		if err != nil {
			return bad(err.Error())
		}
		switch key {
		case LimitOutput:
			l.OutputBytes = n
		case LimitMemory:
			l.MemoryBytes = n
		default:
			l.FileSize = n
		}
	case LimitProcesses:
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || n <= 0 {
			return bad("want a positive integer")
		}
		l.Processes = n
	case LimitCPU:
		quota, period, err := parseCPU(value)
		if err != nil {
			return bad(err.Error())
		}
		l.CPUQuota, l.CPUPeriod = quota, period
	default:
		return &PolicyError{Field: "limit", Value: spec,
			Reason: "unknown key; want wall-time, output, memory, processes, cpu or file-size"}
	}
	return l.validate()
}

// String formats l as comma-separated KEY=VALUE specs that ParseLimits
// reads back.
func (l Limits) String() string {
	var out []string
	add := func(k, v string) { out = append(out, k+"="+v) }
	if l.WallTime > 0 {
		add(LimitWallTime, l.WallTime.String())
	}
	if l.OutputBytes > 0 {
		add(LimitOutput, strconv.FormatInt(l.OutputBytes, 10))
	}
	if l.MemoryBytes > 0 {
		add(LimitMemory, strconv.FormatInt(l.MemoryBytes, 10))
	}
	if l.Processes > 0 {
		add(LimitProcesses, strconv.FormatInt(l.Processes, 10))
	}
	if l.CPUQuota > 0 {
		add(LimitCPU, l.CPUQuota.String()+"/"+l.cpuPeriod().String())
	}
	if l.FileSize > 0 {
		add(LimitFileSize, strconv.FormatInt(l.FileSize, 10))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func (l Limits) cpuPeriod() time.Duration {
	if l.CPUPeriod == 0 {
		return defaultCPUPeriod
	}
	return l.CPUPeriod
}

// has reports whether the limit named by key is set.
func (l Limits) has(key string) bool {
	switch key {
	case LimitWallTime:
		return l.WallTime > 0
	case LimitOutput:
		return l.OutputBytes > 0
	case LimitMemory:
		return l.MemoryBytes > 0
	case LimitProcesses:
		return l.Processes > 0
	case LimitCPU:
		return l.CPUQuota > 0
	case LimitFileSize:
		return l.FileSize > 0
	}
	return false
}

// cgroupNeeded reports whether l has a limit only a cgroup enforces.
func (l Limits) cgroupNeeded() bool {
	return l.MemoryBytes > 0 || l.Processes > 0 || l.CPUQuota > 0
}

func (l Limits) validate() error {
	neg := func(field string, v int64) error {
		if v < 0 {
			return &PolicyError{Field: "limit " + field, Value: strconv.FormatInt(v, 10), Reason: "must be positive"}
		}
		return nil
	}
	for _, c := range []struct {
		field string
		v     int64
	}{
		{LimitWallTime, int64(l.WallTime)}, {LimitOutput, l.OutputBytes}, {LimitMemory, l.MemoryBytes},
		{LimitProcesses, l.Processes}, {"cpu quota", int64(l.CPUQuota)}, {"cpu period", int64(l.CPUPeriod)},
		{LimitFileSize, l.FileSize},
	} {
		if err := neg(c.field, c.v); err != nil {
			return err
		}
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < minMemoryBytes {
		return &PolicyError{Field: "limit memory", Value: strconv.FormatInt(l.MemoryBytes, 10), Reason: "below 8 MiB the sandbox cannot start"}
	}
	if l.CPUPeriod > 0 && l.CPUQuota == 0 {
		return &PolicyError{Field: "limit cpu period", Value: l.CPUPeriod.String(), Reason: "a CPU period needs a quota"}
	}
	if l.CPUQuota > 0 {
		if p := l.cpuPeriod(); p < time.Millisecond || p > time.Second {
			return &PolicyError{Field: "limit cpu period", Value: p.String(), Reason: "must be between 1ms and 1s"}
		}
		if l.CPUQuota < time.Millisecond {
			return &PolicyError{Field: "limit cpu quota", Value: l.CPUQuota.String(), Reason: "must be at least 1ms"}
		}
	}
	return nil
}

var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tib": 1 << 40,
}

func parseBytes(s string) (int64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("want a positive integer with an optional unit (K, M, G, T; binary)")
	}
	mult, ok := byteUnits[strings.ToLower(s[i:])]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q; want B, K, KiB, M, MiB, G, GiB, T or TiB (binary)", s[i:])
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive integer")
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("value overflows 64 bits")
	}
	return n * mult, nil
}

func parseCPU(s string) (quota, period time.Duration, err error) {
	if q, p, ok := strings.Cut(s, "/"); ok {
		quota, err1 := time.ParseDuration(q)
		period, err2 := time.ParseDuration(p)
		if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
			return 0, 0, fmt.Errorf("want QUOTA/PERIOD durations such as 50ms/100ms")
		}
		return quota, period, nil
	}
	cpus, err := strconv.ParseFloat(strings.TrimSuffix(s, "cpu"), 64)
	if err != nil || !(cpus > 0) || cpus > 1024 {
		return 0, 0, fmt.Errorf("want a number of CPUs such as 0.5 or 2")
	}
	quota = time.Duration(math.Round(cpus*float64(defaultCPUPeriod/time.Microsecond))) * time.Microsecond
	return quota, defaultCPUPeriod, nil
}
