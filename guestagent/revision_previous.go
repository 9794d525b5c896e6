//go:build oma_previous_revision

package guestagent

import "github.com/oma-sandbox/oma-sandbox/agentwire"

// Built with -tags oma_previous_revision, the agent announces the revision
// before this one, with every builtin: an agent older than a fix this
// program's has, which the tests of replacing an older agent place
// (agenttest.PreviousRevisionAgentBinary).
func init() { revision = agentwire.Revision - 1 }
