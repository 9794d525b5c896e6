//go:build oma_older_agent

package guestagent

import "github.com/oma-sandbox/oma-sandbox/agentwire"

// Built with -tags oma_older_agent, the agent lacks the ls and write
// builtins and announces no revision, as an agent older than them would:
// what the tests of replacing an older agent place
// (agenttest.OlderAgentBinary).
func init() {
	revision = 0
	delete(builtins, agentwire.BuiltinLs)
	delete(builtins, agentwire.BuiltinWrite)
}
