package bench

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
)

// TestMain removes the guest agent the channel rows built, and the real
// VM's MSB_HOME.
func TestMain(m *testing.M) { realvm.Main(m) }
