package session

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/oma-sandbox/oma-sandbox/msb"
)

// Label keys and values every session resource carries. The keys are the
// seed's, so existing tooling that filters on them keeps working.
const (
	LabelSandbox     = "open-managed-agents.sandbox"
	LabelOwner       = "open-managed-agents.owner"
	LabelWorkspaceID = "open-managed-agents.workspace-id"
	LabelSessionID   = "open-managed-agents.session-id"
	LabelCreatedAt   = "open-managed-agents.created-at"
	// LabelParent names the sandbox a fork was made from.
	LabelParent = "open-managed-agents.parent"
	// LabelAgent is AgentInherited on a fork whose root disk, a snapshot
	// of its source's, holds the guest agent its source's create placed.
	LabelAgent = "open-managed-agents.agent"

	AgentInherited = "inherited"

	SandboxLabelValue = "microsandbox-local"
	OwnerLabelValue   = "open-managed-agents"

	DefaultPrefix = "oma"

	sandboxSuffix  = "-sandbox"
	volumeSuffix   = "-workspace"
	snapshotSuffix = "-snapshot"
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

// CheckPrefix refuses a name prefix ("" means DefaultPrefix) that names
// would not carry unchanged, or that has a dash: two such prefixes could
// name alike (".a" and "a" both name "a-…"), and with a dash "oma-ci-ws-…"
// reads as prefix oma, workspace ci-ws, so a reaper of either prefix would
// take the other's sessions for its own.
func CheckPrefix(prefix string) error {
	if prefix != "" && (strings.Contains(prefix, "-") || namePart(prefix, maxPrefixLen) != prefix) {
		return fmt.Errorf("prefix %q: want 1 to %d characters of a-z, 0-9, _ and ., beginning and ending with a letter or digit (no dash: a name's first dash ends its prefix)", prefix, maxPrefixLen)
	}
	return nil
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

// Widths of a stem's generated parts: the creation time in base 36 (8
// digits from 1972 to 2059, 9 after) and the random part.
const (
	minTimeDigits = 8
	maxTimeDigits = 9
	randDigits    = 6
)

// isStem reports whether stem is exactly what NewNames produces for prefix.
// It is called for every listed resource in a sweep, so nothing is
// compiled here (the prefix's namePart still allocates).
func isStem(prefix, stem string) bool {
	_, ok := StemTime(prefix, stem)
	return ok
}

// StemTime parses a stem NewNames produced for prefix,
// "<prefix>-<workspace>-<session>-<time>-<random>", and returns the time it
// encodes; false when any part is not one NewNames would write.
func StemTime(prefix, stem string) (time.Time, bool) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	tail, ok := strings.CutPrefix(stem, namePart(prefix, maxPrefixLen)+"-")
	if !ok || len(tail) < randDigits+1 {
		return time.Time{}, false
	}
	ids, rnd := tail[:len(tail)-randDigits-1], tail[len(tail)-randDigits:]
	if tail[len(ids)] != '-' || !isBase36(rnd) {
		return time.Time{}, false
	}
	dash := strings.LastIndexByte(ids, '-')
	if dash < 0 {
		return time.Time{}, false
	}
	ids, t36 := ids[:dash], ids[dash+1:]
	if len(t36) < minTimeDigits || len(t36) > maxTimeDigits || t36[0] == '0' || !isBase36(t36) {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(t36, 36, 64)
	if err != nil || !isIDPair(ids) {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

func isBase36(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

// isIDPair reports whether s is "<workspace>-<session>" for two parts
// namePart could have produced (either may contain dashes itself).
func isIDPair(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '-' && isIDPart(s[:i]) && isIDPart(s[i+1:]) {
			return true
		}
	}
	return false
}

// isIDPart reports whether s is a namePart(id, maxIDLen) result: runs of
// [a-z0-9_.] joined by single dashes, neither end in "-._", at most
// maxIDLen bytes.
func isIDPart(s string) bool {
	if s == "" || len(s) > maxIDLen || strings.ContainsAny(s[:1], "-._") || strings.ContainsAny(s[len(s)-1:], "-._") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'z', c == '_', c == '.':
		case c == '-' && s[i-1] != '-':
		default:
			return false
		}
	}
	return true
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

// SnapshotName is the name of a root-disk snapshot a fork boots from, for
// a stem of its own from NewNames: the snapshot lives only while the fork
// is created, so nothing pairs it with a sandbox.
func SnapshotName(stem string) string { return stem + snapshotSuffix }

// SnapshotStem reports the stem of a snapshot name of ours with the given
// prefix, and false for any other snapshot.
func SnapshotStem(prefix, snapshot string) (string, bool) {
	stem, ok := strings.CutSuffix(snapshot, snapshotSuffix)
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
