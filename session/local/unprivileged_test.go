//go:build linux

package local

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// TestUnprivilegedHost runs the core, security and resident sandbox tests
// again as uid 65534, where bwrap builds a user namespace instead of
// dropping privileges with setpriv and the resident agent keeps out of its
// commands' reach by their pid namespace: the other way this package runs.
func TestUnprivilegedHost(t *testing.T) {
	tests := "TestShellBasics|TestCopyInAndAttach|TestRootPreparesUploadsAndSkills|TestWriteOutsideWorkspaceFails|" +
		"TestHostSecretsAreNotReadable|TestSymlinkOutOfWorkspace|TestNetworkDeny|TestProcessIsolation|" +
		"TestCallerSecretsAreInvisible|TestTimeoutKillsDetachedGrandchildren|TestBashTimeoutKillsUntaggedOrphans|TestPassThroughBwrapIsRefused|" +
		"TestNestedUserNamespacesAreRefused|TestVsockIsRefused|TestKernelSurfaceIsRefused|" +
		"TestHostAbstractUnixSocketsAreUnreachable|TestBwrapWithoutSeccompIsRefused|TestEveryCallHasADeadline|" +
		"TestRemovalNeverFollowsGuestSymlinkSwaps|TestDeepTreeIsRemovedAndNeverForgotten|TestCloseStopsCallsOfOtherProcesses|" +
		"TestResidentSandboxOutlivesCalls|TestResidentAgentOutOfReach|TestResidentSandboxEnds|TestResidentSandboxDeaths|" +
		"TestAttachedSessionsShareTheResidentSandbox|TestResidentSandboxOutlivesItsStarter|TestReapEndsAResidentSandboxWhoseStarterWasKilled|" +
		"TestResidentSandboxDiesWithItsCommandsInit|TestCallsRunTheAgentsBuiltins|TestAllowlistThroughTheHostProxy|TestSecretThroughTheHostProxy|TestResidentEgressProxyEndsWithTheSandbox|" +
		"TestResidentIdle|TestAResidentAgentOfALowerRevisionServesOnWhileBusy|TestAnIdleResidentAgentOfALowerRevisionIsReplaced"
	testutil.RunUnprivileged(t, "^("+tests+")$", agenttest.AgentEnv+"="+agenttest.AgentBinary(t),
		agenttest.PreviousAgentEnv+"="+agenttest.PreviousRevisionAgentBinary(t))
}
