package local

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStopKillsProcessesForkedDuringTheStop: a sandbox process that forks
// while the session is being stopped (bwrap cloning its namespace's init)
// leaves children with its own command line; each must be found and killed
// by a later scan, not escape the one that killed their parent.
func TestStopKillsProcessesForkedDuringTheStop(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl to fork without exec")
	}
	ws := t.TempDir()
	// Each child keeps the parent's command line (no exec) and sleeps; the
	// parent forks as fast as it can, up to a bound.
	cmd := exec.Command("perl", "-e", `for (1 .. 400) { my $p = fork; exit 1 unless defined $p; if (!$p) { sleep 100; exit 0 } } sleep 100`,
		"--", "--bind", ws, guestWorkspace)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
		killAllWith(ws)
	})
	for deadline := time.Now().Add(10 * time.Second); len(procsWith(ws)) < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the forking process did not start")
		}
	}
	if err := stopWorkspaceBinders(ws); err != nil {
		t.Fatal(err)
	}
	if left := procsWith(ws); len(left) > 0 {
		t.Fatalf("%d processes binding the workspace survived the stop, e.g. %q", len(left), left[0])
	}
}

// killAllWith SIGKILLs what a failed test left: every process whose
// command line holds marker.
func killAllWith(marker string) {
	for _, p := range procsWith(marker) {
		pid, _, _ := strings.Cut(p, ":")
		if n, err := strconv.Atoi(pid); err == nil {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	}
}
