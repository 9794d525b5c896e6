package agentchan

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

func TestMain(m *testing.M) { agenttest.MainNoLeaks(m) }
