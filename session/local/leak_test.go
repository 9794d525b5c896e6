package local

import (
	"os"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

func TestMain(m *testing.M) {
	// The test binary doubles as a probe run inside sandboxes (see
	// sandboxProbe), where it makes the system calls a shell cannot.
	if len(os.Args) > 1 && os.Args[1] == probeArg {
		os.Exit(sandboxProbe(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == residentHelperArg {
		os.Exit(residentHelper(os.Args[2:]))
	}
	agenttest.MainNoLeaks(m)
}
