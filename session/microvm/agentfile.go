package microvm

import (
	"fmt"
	"os"

	"github.com/oma-sandbox/oma-sandbox/guestagent/bundle"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// agentGuestPath is where create --copy-file places the guest agent.
const agentGuestPath = "/.oma-sandbox/agent"

// agentBinary returns the agent Create places: the file o.AgentFile names,
// else the binary bundled for the guest's architecture; nil when there is
// none (a build without `make agent`).
func agentBinary(o Options) ([]byte, error) {
	if o.AgentFile != "" {
		b, err := os.ReadFile(o.AgentFile)
		if err != nil {
			return nil, fmt.Errorf("%w: agent file: %w", session.ErrInvalid, err)
		}
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: agent file %s is empty", session.ErrInvalid, o.AgentFile)
		}
		return b, nil
	}
	b, _ := bundle.Binary(bundle.GuestArch())
	return b, nil
}
