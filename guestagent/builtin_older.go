//go:build oma_older_agent

package guestagent

import "github.com/oma-sandbox/oma-sandbox/agentwire"

// Built with -tags oma_older_agent, the agent lacks the ls and write
// builtins, announces no revision and knows no `builtin --revision=N`, as
// an agent older than them would: what the tests of replacing an older
// agent place (agenttest.OlderAgentBinary).
func init() {
	revision, knowsRevisionOption = 0, false
	delete(builtins, agentwire.BuiltinLs)
	delete(builtins, agentwire.BuiltinWrite)
}
