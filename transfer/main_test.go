package transfer_test

import (
	"os"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
)

func TestMain(m *testing.M) {
	code := m.Run()
	realvm.Cleanup()
	agenttest.Cleanup()
	os.Exit(code)
}
