package agentchan

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		agenttest.Cleanup()
		os.Exit(code)
	}))
}
