package transfer_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := realvm.Cleanup(); err != nil {
		fmt.Fprintln(os.Stderr, "real VM:", err)
		code = 1
	}
	agenttest.Cleanup()
	os.Exit(code)
}
