package microvm_test

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

// TestMain fails the package if a test leaves a goroutine behind, such as
// the watcher of a channel that was never closed.
func TestMain(m *testing.M) { agenttest.MainNoLeaks(m) }
