//go:build linux

package local

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUnprivilegedHost runs the core and security tests again as uid 65534,
// where bwrap builds a user namespace instead of dropping privileges with
// setpriv: the other way this package runs.
func TestUnprivilegedHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged, or cannot become so")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip(err)
	}
	dir, err := os.MkdirTemp("", "oma-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "local.test")
	if err := copyExecutable(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := errors.Join(os.Chmod(dir, 0o755), os.Mkdir(home, 0o700), os.Chown(home, guestUID, guestUID)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tests := "TestShellBasics|TestCopyInAndAttach|TestRootPreparesUploadsAndSkills|TestWriteOutsideWorkspaceFails|" +
		"TestHostSecretsAreNotReadable|TestSymlinkOutOfWorkspace|TestNetworkDeny|TestProcessIsolation|" +
		"TestCallerSecretsAreInvisible|TestTimeoutKillsDetachedGrandchildren|TestPassThroughBwrapIsRefused|" +
		"TestNestedUserNamespacesAreRefused|TestVsockIsRefused|TestKernelSurfaceIsRefused|" +
		"TestHostAbstractUnixSocketsAreUnreachable|TestBwrapWithoutSeccompIsRefused|TestEveryCallHasADeadline|" +
		"TestRemovalNeverFollowsGuestSymlinkSwaps|TestDeepTreeIsRemovedAndNeverForgotten|TestCloseStopsCallsOfOtherProcesses"
	cmd := exec.CommandContext(ctx, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		bin, "-test.run", "^("+tests+")$", "-test.count=1")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home}
	cmd.Dir = home
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	}
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
