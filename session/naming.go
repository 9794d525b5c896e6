package session

import (
	"crypto/sha256"
	"encoding/hex"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Label keys and values every session resource carries. The keys are the
// seed's, so existing tooling that filters on them keeps working.
const (
	LabelSandbox     = "open-managed-agents.sandbox"
	LabelOwner       = "open-managed-agents.owner"
	LabelWorkspaceID = "open-managed-agents.workspace-id"
	LabelSessionID   = "open-managed-agents.session-id"
	LabelCreatedAt   = "open-managed-agents.created-at"

	SandboxLabelValue = "microsandbox-local"
	OwnerLabelValue   = "open-managed-agents"

	DefaultPrefix = "oma"

	sandboxSuffix = "-sandbox"
	volumeSuffix  = "-workspace"
)

// Part bounds keep every name within msb's 128 bytes whatever the ids are:
// prefix 16 + ws 24 + sess 24 + time 9 + rand 6 + 4 dashes + suffix 10 = 93.
const (
	maxPrefixLen = 16
	maxIDLen     = 24
	hashLen      = 8
)

// Names are the msb resources of one session. The sandbox and its volume
// share Stem and differ only by suffix, so the reaper can pair them from
// listings alone.
type Names struct {
	Stem    string
	Sandbox string
	Volume  string
}

// NewNames derives resource names from the ids. now and random (6 base-36
// characters are taken from it) make the stem unique per creation.
func NewNames(prefix, workspaceID, sessionID string, now time.Time, random uint64) Names {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	stem := strings.Join([]string{
		namePart(prefix, maxPrefixLen),
		namePart(workspaceID, maxIDLen),
		namePart(sessionID, maxIDLen),
		strconv.FormatInt(now.UnixMilli(), 36),
		randomPart(random),
	}, "-")
	return Names{Stem: stem, Sandbox: stem + sandboxSuffix, Volume: stem + volumeSuffix}
}

func randomPart(r uint64) string {
	s := strconv.FormatUint(r%2176782336, 36) // 36^6
	return strings.Repeat("0", 6-len(s)) + s
}

var unsafeNameRun = regexp.MustCompile(`[^a-z0-9_.]+`)

// namePart lower-cases and sanitizes one id to [a-z0-9_.] runs joined by
// '-'. A part longer than max is cut and ends with a hash of the whole id,
// so two long ids that share a prefix still get different names.
func namePart(id string, max int) string {
	s := strings.Trim(unsafeNameRun.ReplaceAllString(strings.ToLower(id), "-"), "-._")
	if s == "" {
		s = "x"
	}
	if len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(id))
	head := strings.TrimRight(s[:max-hashLen-1], "-._")
	if head == "" {
		head = "x"
	}
	return head + "-" + hex.EncodeToString(sum[:])[:hashLen]
}

// stemTail matches what follows "<prefix>-" in a stem NewNames produces.
var stemTail = regexp.MustCompile(`^[a-z0-9_.-]+-[0-9a-z]+-[0-9a-z]{6}$`)

// isStem reports whether stem is one NewNames produces for prefix. It is
// called for every listed resource in a sweep, so nothing is compiled here.
func isStem(prefix, stem string) bool {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	tail, ok := strings.CutPrefix(stem, namePart(prefix, maxPrefixLen)+"-")
	return ok && stemTail.MatchString(tail)
}

// VolumeStem reports the stem of a workspace volume name of ours with the
// given prefix, and false for any other volume.
func VolumeStem(prefix, volume string) (string, bool) {
	stem, ok := strings.CutSuffix(volume, volumeSuffix)
	if !ok || !isStem(prefix, stem) {
		return "", false
	}
	return stem, true
}

// SandboxStem reports the stem of a sandbox name of ours with the given
// prefix, and false for any other sandbox.
func SandboxStem(prefix, sandbox string) (string, bool) {
	stem, ok := strings.CutSuffix(sandbox, sandboxSuffix)
	if !ok || !isStem(prefix, stem) {
		return "", false
	}
	return stem, true
}

// NamesFromStem rebuilds a session's resource names from their stem.
func NamesFromStem(stem string) Names {
	return Names{Stem: stem, Sandbox: stem + sandboxSuffix, Volume: stem + volumeSuffix}
}

// OwnerLabels are the labels that mark a sandbox as ours; listings filter on them.
func OwnerLabels() []msb.Label {
	return []msb.Label{{Key: LabelSandbox, Value: SandboxLabelValue}, {Key: LabelOwner, Value: OwnerLabelValue}}
}
