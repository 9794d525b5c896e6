//go:build unix && !linux

package tools

import (
	"syscall"
	"testing"
)

// agentRuns says the guest agent runs here: only on Linux.
const agentRuns = false

func runBuiltin(*testing.T, string, string, ...string) scriptRun { panic("no guest agent off Linux") }

func runBuiltinAs(*testing.T, *syscall.Credential, string, string, ...string) scriptRun {
	panic("no guest agent off Linux")
}
