package local

import (
	"crypto/rand"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// validName is the name rule shared with the msb backend, so a session
// name is valid in either.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

const defaultNamePrefix = "oma-local"

// sessionName builds `<prefix>-<ws>-<sess>-<time36>-<rand>`, each part
// lower-cased, reduced to [a-z0-9_.-] and bounded so any ids yield a valid
// name of at most 128 bytes.
func sessionName(prefix, workspaceID, sessionID string, now time.Time) string {
	if prefix == "" {
		prefix = defaultNamePrefix
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	suffix := strconv.FormatInt(now.UnixMilli(), 36) + "-" + strconv.FormatUint(uint64(rnd[0])<<24|uint64(rnd[1])<<16|uint64(rnd[2])<<8|uint64(rnd[3]), 36)
	return namePart(prefix, 24) + "-" + namePart(workspaceID, 40) + "-" + namePart(sessionID, 40) + "-" + suffix
}

func namePart(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if b.Len() >= max {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" || !(out[0] >= 'a' && out[0] <= 'z' || out[0] >= '0' && out[0] <= '9') {
		out = "x" + out
		if len(out) > max {
			out = out[:max]
		}
	}
	return out
}
