//go:build unix

package chaos

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
)

// TestMain removes the guest agent the channel sessions were given, and
// the real VM's MSB_HOME.
func TestMain(m *testing.M) { realvm.Main(m) }

// agentFile builds the guest agent (once per process) and gives t a
// private agent cache for Create to copy it into.
func agentFile(t *testing.T) string {
	t.Helper()
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	return agenttest.AgentBinary(t)
}
