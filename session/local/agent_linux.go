package local

import (
	"os"
	"path/filepath"

	"github.com/oma-sandbox/oma-sandbox/guestagent"
)

// A program linking the local backend carries the guest agent, and serves
// as it when a sandbox runs it as the agent (agentGuestPath) or the agent
// starts itself again (guestagent.ProgramName), as the egress relay does:
// a build without the bundled agent still runs every call's builtin, in
// this program's execute-only copy (agent.hostPath).
func init() {
	if os.Args[0] == agentGuestPath || filepath.Base(os.Args[0]) == guestagent.ProgramName {
		os.Exit(guestagent.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
}
