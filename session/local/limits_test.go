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

	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// TestMemoryBombIsKilledAndReported: a session's memory limit kills what
// exceeds it and the call says so, whether the call runs in the session's
// resident sandbox (whose groups are the session's, ended with it) or in
// a sandbox of its own (groups of the call's, gone when it ends).
func TestMemoryBombIsKilledAndReported(t *testing.T) {
	for name, tc := range map[string]struct {
		lim      Limits
		resident bool
	}{
		"resident": {lim: Limits{MemoryBytes: 64 << 20, Processes: 200}, resident: os.Geteuid() == 0},
		"per call": {lim: Limits{MemoryBytes: 64 << 20, Processes: 200}},
	} {
		t.Run(name, func(t *testing.T) {
			s := newTestSession(t, Options{Limits: tc.lim, SandboxPerCall: !tc.resident})
			res := sh(t, s, `tail /dev/zero; echo "rc=$?"`)
			if !strings.Contains(string(res.Stdout), "rc=137") {
				t.Fatalf("memory bomb not killed: stdout %q stderr %q", res.Stdout, res.Stderr)
			}
			if !strings.Contains(string(res.Stderr), "memory limit of 64 MiB reached: the kernel killed 1 process(es)") {
				t.Fatalf("kill not reported: %q", res.Stderr)
			}
			// The session stays usable after the kill, and the next call
			// reports no kill of its own.
			if res := sh(t, s, `echo ok`); string(res.Stdout) != "ok\n" || len(res.Stderr) != 0 {
				t.Fatalf("after bomb: %q %q", res.Stdout, res.Stderr)
			}
			if got := s.Served().Resident; (got == 2) != tc.resident {
				t.Fatalf("%d of 2 calls ran in the resident sandbox", got)
			}
			left := func() (dirs []string) {
				data, _ := os.ReadFile(filepath.Join(s.dirs.Root, cgroupFile))
				for _, dir := range strings.Fields(string(data)) {
					if exists(dir) {
						dirs = append(dirs, dir)
					}
				}
				return dirs
			}
			if !tc.resident && len(left()) > 0 {
				t.Errorf("cgroups %q left between calls", left())
			}
			require.NoError(t, s.Close(context.Background()))
			if len(left()) > 0 {
				t.Errorf("cgroups %q left after Close", left())
			}
		})
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

// TestCPUQuotaSlowsBusyLoop runs a busy loop for 1.5 s of wall time
// under a tenth of a CPU. The loop counts the stalls it sees (50 ms or
// more between two turns): the kernel lets it run 10 ms of each 100 ms
// period, so it stalls about 15 times, which no scheduler does to an
// unlimited loop that often. The CPU time the shell used stays near the
// quota's share: 150 ms, with room for the period the loop starts in and
// for accounting on a loaded machine (one CI run measured 281 ms). An
// unlimited loop, as the control, uses more.
func TestCPUQuotaSlowsBusyLoop(t *testing.T) {
	limited := newTestSession(t, Options{Limits: Limits{CPUQuota: 10 * time.Millisecond, CPUPeriod: 100 * time.Millisecond}})
	free := newTestSession(t, Options{})
	const loop = `now=${EPOCHREALTIME/./}; end=$(( now + 1500000 )); stalls=0
while prev=$now; now=${EPOCHREALTIME/./}; (( now < end )); do (( now - prev >= 50000 )) && stalls=$(( stalls + 1 )); done
echo "$stalls"; times`
	stalls := make([]int, 2)
	cpu := make([]time.Duration, 2)
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
			stalls[i], cpu[i] = loopReport(t, string(res.Stdout))
		}()
	}
	wg.Wait()
	t.Logf("over 1.5 s: limited %d stalls, %s CPU; unlimited %d stalls, %s CPU", stalls[0], cpu[0], stalls[1], cpu[1])
	if stalls[0] < 10 {
		t.Fatalf("CPU quota of 10%% not enforced: the loop stalled %d times in 1.5 s, want about 15", stalls[0])
	}
	if cpu[0] > 375*time.Millisecond {
		t.Fatalf("CPU quota of 10%% not enforced: the loop used %s in 1.5 s", cpu[0])
	}
	if cpu[1] <= cpu[0] {
		t.Fatalf("the unlimited loop used no more CPU (%s) than the limited one (%s)", cpu[1], cpu[0])
	}
}

// loopReport reads the stall count the loop printed and the user and
// system times of bash's `times` first line after it.
func loopReport(t *testing.T, out string) (int, time.Duration) {
	t.Helper()
	lines := strings.SplitN(out, "\n", 3)
	if len(lines) < 2 {
		t.Fatalf("the loop printed %q", out)
	}
	stalls, err := strconv.Atoi(lines[0])
	f := strings.Fields(lines[1])
	if err != nil || len(f) != 2 {
		t.Fatalf("the loop printed %q", out)
	}
	var total time.Duration
	for _, v := range f {
		d, err := time.ParseDuration(v) // bash prints e.g. 0m0.158s
		if err != nil {
			t.Fatalf("times printed %q: %v", out, err)
		}
		total += d
	}
	return stalls, total
}

func tail(b []byte) []byte {
	if len(b) > 500 {
		return b[len(b)-500:]
	}
	return b
}
