package grep

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

func TestMain(m *testing.M) { agenttest.Main(m) }
