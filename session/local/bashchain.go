package local

import (
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// bashNextFile, in a session's state directory, holds the id the session's
// last bash call named for its successor, or nothing when it named none.
// The file's presence says that a bash call came before.
const bashNextFile = "bash-next"

// BashChain keeps the id a bash call names for its successor
// (bashproto.Call.Next) in the session's state directory, where a toolbox
// in another process finds it: a one-shot CLI call then runs in the bash
// the resident agent started ahead for it, as a long-lived toolbox's calls
// do. It implements tools.BashChain. The directory is the host's: nothing
// in the sandbox can reach it.
type BashChain struct{ dir string }

// BashChain is the session's chain of bash calls across processes.
func (s *Session) BashChain() BashChain { return BashChain{dir: s.dirs.Root} }

// Take claims the id by moving its file to a name of this call's own: of
// two processes taking at once one has it, the other finds none and starts
// a bash of its own.
func (c BashChain) Take() (next string, before bool) {
	claim := filepath.Join(c.dir, bashNextFile+"."+rand.Text())
	if err := os.Rename(filepath.Join(c.dir, bashNextFile), claim); err != nil {
		return "", false
	}
	defer os.Remove(claim)
	f, err := os.Open(claim)
	if err != nil {
		return "", true
	}
	defer f.Close()
	id, err := io.ReadAll(io.LimitReader(f, callIDLen+1))
	if err != nil || !isCallID(string(id)) {
		return "", true
	}
	return string(id), true
}

// Leave writes next, replacing an id that waits, whose bash then lingers
// until the agent ends it; "" only marks that a call came. A chain that
// cannot be written costs the next call its head start, nothing more, so
// failures are not reported.
func (c BashChain) Leave(next string) {
	path := filepath.Join(c.dir, bashNextFile)
	if next == "" {
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
			_ = f.Close()
		}
		return
	}
	tmp := path + "." + rand.Text()
	if os.WriteFile(tmp, []byte(next), 0o600) == nil && os.Rename(tmp, path) == nil {
		return
	}
	_ = os.Remove(tmp)
}

// callIDLen is the length of a bash call's id (bashproto.NewCall).
const callIDLen = 32

func isCallID(s string) bool {
	return len(s) == callIDLen && strings.Trim(s, "0123456789abcdef") == ""
}
