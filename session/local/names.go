package local

import (
	"crypto/rand"
	"encoding/binary"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

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
