package local

import (
	"fmt"
	"slices"
	"strings"
)

// Evidence is how much of a control the host's probes proved.
type Evidence string

const (
	EvidenceNone    Evidence = "none"
	EvidencePartial Evidence = "partial"
	EvidenceFull    Evidence = "full"
)

// Control is the proof of one isolation control: its evidence and, in
// words, what proved it or why it is missing.
type Control struct {
	Evidence Evidence
	Detail   string
}

func full(detail string) Control    { return Control{EvidenceFull, detail} }
func partial(detail string) Control { return Control{EvidencePartial, detail} }
func none(detail string) Control    { return Control{EvidenceNone, detail} }

// Capabilities are what this host can enforce, from probes that really
// ran. Resources summarises Limits, which holds one Control per limit key
// (wall-time, output, memory, processes, cpu, file-size).
type Capabilities struct {
	Platform   string // runtime.GOOS
	Backend    string // bubblewrap, or "" when none works
	Filesystem Control
	Network    Control
	Process    Control
	Resources  Control
	Limits     map[string]Control
	// Modes and NetworkModes are what the backend can run.
	Modes        []Mode
	NetworkModes []Network
}

var allModes = []Mode{ModeReadOnly, ModeWorkspaceWrite, ModeDangerFullAccess}

// String renders the capabilities for an operator, one control a line.
func (c Capabilities) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "platform %s, backend %s\n", c.Platform, orNone(c.Backend))
	for _, r := range []struct {
		name string
		c    Control
	}{{"filesystem", c.Filesystem}, {"network", c.Network}, {"process", c.Process}, {"resources", c.Resources}} {
		fmt.Fprintf(&b, "%-10s %-7s %s\n", r.name, r.c.Evidence, r.c.Detail)
	}
	for _, k := range limitKeys {
		if lc, ok := c.Limits[k]; ok {
			fmt.Fprintf(&b, "  limit %-9s %-7s %s\n", k, lc.Evidence, lc.Detail)
		}
	}
	return b.String()
}

var limitKeys = []string{LimitWallTime, LimitOutput, LimitMemory, LimitProcesses, LimitCPU, LimitFileSize}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// summarizeResources derives the Resources control from the per-limit ones.
func summarizeResources(limits map[string]Control) Control {
	var have, missing []string
	for _, k := range limitKeys {
		if limits[k].Evidence == EvidenceFull {
			have = append(have, k)
		} else {
			missing = append(missing, k)
		}
	}
	switch {
	case len(missing) == 0:
		return full("every limit is enforced")
	case len(have) == 0:
		return none("no limit is enforced")
	default:
		return partial("enforced: " + strings.Join(have, ", ") + "; not enforced: " + strings.Join(missing, ", "))
	}
}

// rank orders evidence; -1 for an unknown value.
func rank(e Evidence) int {
	switch e {
	case EvidenceNone:
		return 0
	case EvidencePartial:
		return 1
	case EvidenceFull:
		return 2
	}
	return -1
}

// stronger is the stronger of a default and a required evidence.
func stronger(def, req Evidence) Evidence {
	if rank(req) > rank(def) {
		return req
	}
	return def
}

// check refuses a policy and limits that need evidence the host lacks.
func (c Capabilities) check(p Policy, l Limits) error {
	if c.Backend == "" {
		return &UnavailableError{Control: "filesystem", Reason: "no working sandbox backend: " + c.Filesystem.Detail}
	}
	if !slices.Contains(c.Modes, p.Mode) {
		return &UnavailableError{Control: "filesystem", Reason: fmt.Sprintf("the %s backend cannot run mode %s", c.Backend, p.Mode)}
	}
	if !slices.Contains(c.NetworkModes, p.Network) {
		return &UnavailableError{Control: "network", Reason: fmt.Sprintf("the %s backend cannot run network mode %s", c.Backend, p.Network)}
	}
	fs, net := EvidenceFull, EvidenceNone
	if p.Mode == ModeDangerFullAccess {
		fs = EvidenceNone
	} else if p.Network != NetworkUnrestricted {
		// An allowlist rests on the same namespace as deny.
		net = EvidenceFull
	}
	proc := stronger(EvidencePartial, p.Require.Process)
	for _, r := range []struct {
		name string
		need Evidence
		have Control
	}{
		{"filesystem", stronger(fs, p.Require.Filesystem), c.Filesystem},
		{"network", stronger(net, p.Require.Network), c.Network},
		{"process", proc, c.Process},
	} {
		if rank(r.have.Evidence) < rank(r.need) {
			return &UnavailableError{Control: r.name, Reason: fmt.Sprintf("%s evidence needed, host has %s: %s", r.need, r.have.Evidence, r.have.Detail)}
		}
	}
	for _, k := range limitKeys {
		if !l.has(k) {
			continue
		}
		need := EvidenceFull
		if k == LimitWallTime || k == LimitOutput {
			need = proc
		}
		if have := c.Limits[k]; rank(have.Evidence) < rank(need) {
			return &UnavailableError{Control: "limit " + k, Reason: have.Detail}
		}
	}
	return nil
}
