package bench

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// TestMain removes the guest agent the channel rows built.
func TestMain(m *testing.M) { agenttest.Main(m) }
