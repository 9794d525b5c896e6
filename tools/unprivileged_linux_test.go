package tools_test

import (
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// unprivilegedSuite is the shared suite's tests that need no fakemsb: run
// again as another user, on the local backend only.
var unprivilegedSuite = []string{
	"TestBashSupervisorIsTheAgent", "TestBashExitCodeStreamed", "TestBashForgedTerminalLine", "TestBashPkillSparesTheWrapper",
	"TestBashGuestTimeoutKeepsSession", "TestBashHostTimeoutAndAbortKillGuest", "TestBashBackgroundOutlivesCall",
	"TestBashEarlierProcessCannotForgeLaterStatus", "TestBashTimeoutInput", "TestBashOutputTruncated", "TestBashLeavesNoState",
	"TestWriteAndEditThroughSymlinks", "TestEditLineEndingsAndBOM", "TestEditWithoutChangeIsAnError", "TestEditErrorsAreTyped",
	"TestWriteOntoDirectory", "TestWriteNameLimits", "TestWriteKeepsMode", "TestWriteIsAtomicForReaders",
	"TestParallelEditsOfOneFileAllLand", "TestFailedWriteLeavesNothing", "TestWriteUnderFileOrLoop",
	"TestEditAfterWriteSkipsTheRead", "TestLargeFileRoundTripMemory", "TestLsOrder", "TestListingsEscapeNamesAndHideTempFiles",
	"TestGrepStableAndAnnouncesTruncation", "TestSearchesSurviveUnreadableDirectory", "TestSearchUsesOperationTimeout",
	"TestParallelMixedCalls", "TestGlobNarrowsItsWalk", "TestLsWhileEntriesVanish", "TestReadOffsetZero", "TestReadBinaryFile",
	"TestReadHintsAreShellQuoted", "TestReadOnlyToolsOpenUploads", "TestReadRefusesCutOutput", "TestGuestEnvKeepsBytecodeOut",
	"TestGlob", "TestGlobStopsAtHundred", "TestGlobByteLimits", "TestGrep", "TestParallelSearchesKeepTheirOwnWork",
	"TestWriteReadRoundTrip", "TestReadPaging", "TestReadByteLimit", "TestReadErrors", "TestEdit", "TestEditLostUpdate",
	"TestLs", "TestRefusedBeforeAnyRoundTrip", "TestBashRunsInTheBashStartedAhead",
}

// TestSharedSuiteUnprivileged runs the shared suite again as uid 65534 on
// the local backend, whose session then has its resident sandbox keep the
// agent out of its commands' pid namespace (docs/guest-agent.md).
func TestSharedSuiteUnprivileged(t *testing.T) {
	testutil.RunUnprivileged(t, "^("+strings.Join(unprivilegedSuite, "|")+")$",
		"OMA_TEST_BACKENDS=local", agenttest.AgentEnv+"="+agenttest.AgentBinary(t))
}
