package local

import (
	"strings"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// bashNextFile, in a session's state directory, holds the id the session's
// last bash call named for its successor, or noneWaiting when it named
// none. The file's presence says that a bash call came before.
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

// noneWaiting stands in the file where no id waits: no id has its bytes.
var noneWaiting = strings.Repeat("-", bashproto.IDLen)
