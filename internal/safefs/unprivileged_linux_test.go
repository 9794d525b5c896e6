package safefs

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// TestRemoveAllUnprivileged runs the removal tests again as uid 65534,
// where a directory the guest made unreadable (mode 000) must be made
// searchable through a descriptor (O_PATH, never the path) before its
// contents can go: root never takes that path.
func TestRemoveAllUnprivileged(t *testing.T) {
	testutil.RunUnprivileged(t, "^(TestRemoveAllNeverFollowsSymlinks|TestRemoveAllUnderSymlinkSwaps|TestRemoveAllDeeperThanTheDescriptorLimit)$")
}
