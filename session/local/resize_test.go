//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// TestResizeBindsLaterCalls: Resize rewrites the session's limits (and
// its record, so an attached session sees them), and the next call's
// cgroup carries them; bad input changes nothing.
func TestResizeBindsLaterCalls(t *testing.T) {
	ctx := context.Background()
	s := newTestSession(t, Options{})
	if !hostEnforces(t, s, Limits{MemoryBytes: 64 << 20, CPUQuota: 100 * time.Millisecond}) {
		t.Skip("this host cannot enforce cgroup memory and CPU limits")
	}
	if err := s.Resize(ctx, session.Resize{CPUs: 2, Memory: "96M"}); err != nil {
		t.Fatal(err)
	}
	want := Limits{MemoryBytes: 96 << 20, CPUQuota: 200 * time.Millisecond, CPUPeriod: 100 * time.Millisecond}
	if got := s.limits(); got != want {
		t.Errorf("limits = %+v, want %+v", got, want)
	}
	attached, err := Attach(ctx, filepath.Dir(s.dirs.Root), s.Name())
	if err != nil {
		t.Fatal(err)
	}
	if got := attached.limits(); got != want {
		t.Errorf("attached session's limits = %+v, want %+v", got, want)
	}
	// The next call's own cgroup holds the new limits.
	callLimits := runningCallLimits(t, s)
	if callLimits["memory.max"] != "100663296" && callLimits["memory.limit_in_bytes"] != "100663296" {
		t.Errorf("call cgroup limits %v, want memory 100663296", callLimits)
	}
	if callLimits["cpu.max"] != "200000 100000" && callLimits["cpu.cfs_quota_us"] != "200000" {
		t.Errorf("call cgroup limits %v, want a CPU quota of 200000 per 100000", callLimits)
	}
	for _, r := range []session.Resize{{}, {CPUs: -1}, {CPUs: 256}, {Memory: "2Gi"}, {Memory: "4M"}} {
		if err := s.Resize(ctx, r); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("Resize(%+v) = %v, want ErrInvalid", r, err)
		}
	}
	if got := s.limits(); got != want {
		t.Errorf("a refused resize changed the limits to %+v", got)
	}
}

// hostEnforces reports whether this host enforces l for s's policy.
func hostEnforces(t *testing.T, s *Session, l Limits) bool {
	t.Helper()
	caps, _ := probeHost(context.Background(), probeRequest{limits: l})
	return caps.check(s.rec.Policy, l) == nil
}

// waitingCall starts a call that waits and returns the cgroup parents of
// the session, under which the call's groups are, and a stop that ends the
// call.
func waitingCall(t *testing.T, s *Session) (parents []string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Shell(ctx, session.Command{Script: `echo started; sleep 20`}, session.ShellOptions{
			Stdout: func([]byte) {
				select {
				case started <- struct{}{}:
				default:
				}
			}})
	}()
	stop = func() { cancel(); <-done }
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		stop()
		t.Fatal("the call did not start")
	}
	data, err := os.ReadFile(filepath.Join(s.dirs.Root, cgroupFile))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	return strings.Fields(string(data)), stop
}

// runningCallLimits starts a call that waits, reads its cgroups' memory
// and CPU limit files, and ends it.
func runningCallLimits(t *testing.T, s *Session) map[string]string {
	t.Helper()
	parents, stop := waitingCall(t, s)
	defer stop()
	out := map[string]string{}
	for _, parent := range parents {
		// A call's own groups, or the resident sandbox's it runs in.
		calls, _ := filepath.Glob(filepath.Join(parent, "*-*"))
		for _, c := range calls {
			for _, f := range []string{"memory.max", "memory.limit_in_bytes", "cpu.max", "cpu.cfs_quota_us"} {
				if b, err := os.ReadFile(filepath.Join(c, f)); err == nil {
					out[f] = strings.TrimSpace(string(b))
				}
			}
		}
	}
	return out
}

// TestResizeBindsAnotherProcessCalls: a resize made through one attached
// session binds the calls of another attached before it (another process,
// as the CLI beside a program using the library), whose next call must
// not start the resident sandbox under the limits it attached with.
func TestResizeBindsAnotherProcessCalls(t *testing.T) {
	ctx := context.Background()
	s := newTestSession(t, Options{})
	if !hostEnforces(t, s, Limits{MemoryBytes: 64 << 20, CPUQuota: 100 * time.Millisecond}) {
		t.Skip("this host cannot enforce cgroup memory and CPU limits")
	}
	other, err := Attach(ctx, filepath.Dir(s.dirs.Root), s.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Resize(ctx, session.Resize{CPUs: 2, Memory: "96M"}); err != nil {
		t.Fatal(err)
	}
	callLimits := runningCallLimits(t, other)
	if callLimits["memory.max"] != "100663296" && callLimits["memory.limit_in_bytes"] != "100663296" {
		t.Errorf("the other session's call ran under cgroup limits %v, want memory 100663296", callLimits)
	}
	if got := other.limits().MemoryBytes; got != 96<<20 {
		t.Errorf("the other session's limits say memory %d, want %d", got, 96<<20)
	}
}

// TestResizesOfTwoProcessesAtOnce: two processes resizing a session at
// once, one its CPUs and the other its memory, both succeed: neither's
// change may be lost to the other's rewrite of the record.
func TestResizesOfTwoProcessesAtOnce(t *testing.T) {
	ctx := context.Background()
	s := newTestSession(t, Options{})
	if !hostEnforces(t, s, Limits{MemoryBytes: 64 << 20, CPUQuota: 100 * time.Millisecond}) {
		t.Skip("this host cannot enforce cgroup memory and CPU limits")
	}
	other, err := Attach(ctx, filepath.Dir(s.dirs.Root), s.Name())
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- s.Resize(ctx, session.Resize{CPUs: 2}) }()
	go func() { errs <- other.Resize(ctx, session.Resize{Memory: "96M"}) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	rec, err := readRecord(s.dirs.Root)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Limits.MemoryBytes != 96<<20 || rec.Limits.CPUQuota != 200*time.Millisecond {
		t.Errorf("after both resizes the record's limits are %+v, want memory %d and a CPU quota of 200ms", rec.Limits, 96<<20)
	}
}
