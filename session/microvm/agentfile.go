package microvm

import (
	"fmt"
	"os"

	"github.com/oma-sandbox/oma-sandbox/guestagent/bundle"
	"github.com/oma-sandbox/oma-sandbox/guestagent/selfagent"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// agentGuestPath is where create --copy-file places the guest agent.
const agentGuestPath = selfagent.GuestPath

// The agent this build embeds and whether the program can serve as its
// own in a guest: variables for the tests of a build without the one or
// the other.
var (
	bundled   = bundle.Binary
	selfGuest = selfagent.Guest
)

// agentPath returns the host path of the private copy of the agent Create
// places: the file o.AgentFile names, else the agent bundled for the
// guest's architecture, else this program when it can serve as its own in
// the guest (a static Linux build of that architecture). An AgentFile
// that cannot be read is session.ErrInvalid; any other error says why
// there is no agent to place.
func agentPath(o Options) (string, error) {
	arch := bundle.GuestArch()
	var bin []byte
	if o.AgentFile != "" {
		var err error
		if bin, err = os.ReadFile(o.AgentFile); err != nil {
			return "", fmt.Errorf("%w: agent file: %w", session.ErrInvalid, err)
		}
		if len(bin) == 0 {
			return "", fmt.Errorf("%w: agent file %s is empty", session.ErrInvalid, o.AgentFile)
		}
	} else {
		bin, _ = bundled(arch)
	}
	if bin == nil {
		if ok, why := selfGuest(arch); !ok {
			return "", fmt.Errorf("%w: this build embeds none for linux/%s (make agent does) and cannot serve as its own: %s; "+
				"build it with make build, or with CGO_ENABLED=0", session.ErrNoAgent, arch, why)
		}
	}
	dir, err := bundle.CacheDir()
	if err != nil {
		return "", err
	}
	if bin == nil {
		return bundle.SelfCached(dir, 0o500)
	}
	return bundle.Cached(dir, bin)
}
