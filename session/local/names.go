package local

import (
	"crypto/rand"
	"encoding/binary"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// validName is the msb name rule, ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$, so a
// local session name is valid there too; Attach and Reap accept nothing
// else as a session directory. (Written out: that expression compiles to a
// program of some 1,800 allocations at every start of the program.)
func validName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

const defaultNamePrefix = "oma-local"

// sessionName is the project's resource stem for these ids
// (`<prefix>-<ws>-<sess>-<time36>-<rand>`, every part bounded).
func sessionName(prefix, workspaceID, sessionID string, now time.Time) string {
	if prefix == "" {
		prefix = defaultNamePrefix
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return session.NewNames(prefix, workspaceID, sessionID, now, binary.LittleEndian.Uint64(rnd[:])).Stem
}
