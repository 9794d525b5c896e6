package bench

import (
	"os"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// TestMain removes the guest agent the channel rows built.
func TestMain(m *testing.M) {
	code := m.Run()
	agenttest.Cleanup()
	os.Exit(code)
}
