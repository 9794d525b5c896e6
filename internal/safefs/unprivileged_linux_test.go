package safefs

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRemoveAllUnprivileged runs the removal tests again as uid 65534,
// where a directory the guest made unreadable (mode 000) must be made
// searchable through a descriptor (O_PATH, never the path) before its
// contents can go: root never takes that path.
func TestRemoveAllUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip(err)
	}
	// Not t.TempDir: its parent is root's alone.
	dir, err := os.MkdirTemp("", "oma-safefs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = RemoveAll(dir) })
	home := filepath.Join(dir, "home")
	bin := filepath.Join(dir, "safefs.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{os.Chmod(dir, 0o755), os.Mkdir(home, 0o700), os.Chown(home, 65534, 65534)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		bin, "-test.run", "^(TestRemoveAllNeverFollowsSymlinks|TestRemoveAllUnderSymlinkSwaps|TestRemoveAllDeeperThanTheDescriptorLimit)$", "-test.count=1")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + home}
	cmd.Dir = home
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("as uid 65534: %v\n%s", err, out)
	}
}

func copyFile(src, dst string) error {
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
