//go:build unix && !linux

package tools

import "testing"

// agentRuns says the guest agent runs here: only on Linux.
const agentRuns = false

func runBuiltin(*testing.T, string, string, ...string) scriptRun { panic("no guest agent off Linux") }
