package msb

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind, such as
// a pipe copier of a process that was never waited for.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
