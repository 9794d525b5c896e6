package bench

import (
	"os"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
)

// TestMain removes the guest agent the channel rows built, and the real
// VM's MSB_HOME.
func TestMain(m *testing.M) {
	code := m.Run()
	realvm.Cleanup()
	agenttest.Cleanup()
	os.Exit(code)
}
