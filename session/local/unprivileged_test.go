//go:build linux

package local

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// TestUnprivilegedHost runs the core and security tests again as uid 65534,
// where bwrap builds a user namespace instead of dropping privileges with
// setpriv: the other way this package runs.
func TestUnprivilegedHost(t *testing.T) {
	tests := "TestShellBasics|TestCopyInAndAttach|TestRootPreparesUploadsAndSkills|TestWriteOutsideWorkspaceFails|" +
		"TestHostSecretsAreNotReadable|TestSymlinkOutOfWorkspace|TestNetworkDeny|TestProcessIsolation|" +
		"TestCallerSecretsAreInvisible|TestTimeoutKillsDetachedGrandchildren|TestPassThroughBwrapIsRefused|" +
		"TestNestedUserNamespacesAreRefused|TestVsockIsRefused|TestKernelSurfaceIsRefused|" +
		"TestHostAbstractUnixSocketsAreUnreachable|TestBwrapWithoutSeccompIsRefused|TestEveryCallHasADeadline|" +
		"TestRemovalNeverFollowsGuestSymlinkSwaps|TestDeepTreeIsRemovedAndNeverForgotten|TestCloseStopsCallsOfOtherProcesses"
	testutil.RunUnprivileged(t, "^("+tests+")$")
}
