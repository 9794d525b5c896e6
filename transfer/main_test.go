package transfer_test

import (
	"os"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	agenttest.Cleanup()
	os.Exit(code)
}
