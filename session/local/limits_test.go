//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

func TestMemoryBombIsKilledAndReported(t *testing.T) {
	s := newTestSession(t, Options{Limits: Limits{MemoryBytes: 64 << 20}})
	res := sh(t, s, `tail /dev/zero; echo "rc=$?"`)
	if !strings.Contains(string(res.Stdout), "rc=137") {
		t.Fatalf("memory bomb not killed: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if !strings.Contains(string(res.Stderr), "memory limit of 64 MiB reached: the kernel killed") {
		t.Fatalf("kill not reported: %q", res.Stderr)
	}
	// The session stays usable after the kill, and no group outlives a call.
	if got := string(sh(t, s, `echo ok`).Stdout); got != "ok\n" {
		t.Fatalf("after bomb: %q", got)
	}
	data, _ := os.ReadFile(filepath.Join(s.dirs.Root, cgroupFile))
	for _, dir := range strings.Fields(string(data)) {
		if exists(dir) {
			t.Errorf("cgroup %s left between calls", dir)
		}
	}
}

func TestForkBombIsContained(t *testing.T) {
	s := newTestSession(t, Options{Limits: Limits{Processes: 64}})
	ctx := context.Background()
	bomb := make(chan error, 1)
	var res *session.Result
	go func() {
		var err error
		res, err = s.Shell(ctx, session.Command{Script: `b() { b | b & }; b; sleep 5`},
			session.ShellOptions{GuestTimeout: 3 * time.Second, MaxOutput: 1 << 20})
		bomb <- err
	}()
	// The host keeps starting processes while the bomb runs.
	time.Sleep(500 * time.Millisecond)
	for i := 0; i < 10; i++ {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := exec.CommandContext(hctx, "/bin/true").Run()
		cancel()
		if err != nil {
			t.Fatalf("host could not run a process during the fork bomb: %v", err)
		}
	}
	err := <-bomb
	if !errors.Is(err, session.ErrGuestTimeout) && !errors.Is(err, session.ErrOutputOverflow) {
		t.Fatalf("fork bomb: %v", err)
	}
	if !strings.Contains(string(res.Stderr), "process limit of 64 reached") {
		t.Fatalf("limit not reported: %q", tail(res.Stderr))
	}
	if got := string(sh(t, s, `echo ok`).Stdout); got != "ok\n" {
		t.Fatalf("after bomb: %q", got)
	}
}

func TestFileSizeLimitStopsLargeWrite(t *testing.T) {
	s := newTestSession(t, Options{Limits: Limits{FileSize: 1 << 20}})
	res := sh(t, s, `head -c 5000000 /dev/zero > big; echo "rc=$?"; stat -c %s big`)
	out := string(res.Stdout)
	if !strings.Contains(out, "rc=153") || !strings.HasSuffix(out, "\n1048576\n") {
		t.Fatalf("file-size limit not applied: %q %q", out, res.Stderr)
	}
}

// TestCPUQuotaSlowsBusyLoop compares two busy loops running side by side
// for the same wall time: the one under a tenth of a CPU counts far less.
func TestCPUQuotaSlowsBusyLoop(t *testing.T) {
	limited := newTestSession(t, Options{Limits: Limits{CPUQuota: 10 * time.Millisecond, CPUPeriod: 100 * time.Millisecond}})
	free := newTestSession(t, Options{})
	const loop = `end=$(( ${EPOCHREALTIME/./} + 1500000 )); n=0; while (( ${EPOCHREALTIME/./} < end )); do n=$((n+1)); done; echo $n`
	counts := make([]int, 2)
	var wg sync.WaitGroup
	for i, s := range []*Session{limited, free} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := s.Shell(context.Background(), session.Command{Script: loop}, session.ShellOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			counts[i], _ = strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
		}()
	}
	wg.Wait()
	t.Logf("iterations: limited %d, unlimited %d", counts[0], counts[1])
	if counts[1] == 0 || counts[0]*3 > counts[1] {
		t.Fatalf("CPU quota did not slow the loop: limited %d, unlimited %d", counts[0], counts[1])
	}
}

func tail(b []byte) []byte {
	if len(b) > 500 {
		return b[len(b)-500:]
	}
	return b
}
