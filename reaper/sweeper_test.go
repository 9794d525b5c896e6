package reaper

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/msb"
)

// holdList makes `list` calls wait until release is closed or their ctx ends.
func holdList(f *fakeRunner, release <-chan struct{}) {
	f.hook = func(ctx context.Context, argv []string) error {
		if argv[0] != "list" {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitWaiters returns once n callers wait on the sweep in flight.
func waitWaiters(t *testing.T, s *Sweeper, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		w := 0
		if s.cur != nil {
			w = s.cur.waiters
		}
		s.mu.Unlock()
		if w == n {
			return
		}
	}
	t.Fatalf("never saw %d waiting callers", n)
}

func listings(f *fakeRunner) int {
	c := count(f.log())
	return c["list"] + c["volume list"]
}

func TestSweeperSharesOneSweep(t *testing.T) {
	f := newFakeRunner()
	for i := range 5 {
		f.addSession(i, stale)
	}
	release := make(chan struct{})
	holdList(f, release)
	s := NewSweeper(msb.NewClient(f), options)

	const callers = 20
	reports := make([]*Report, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { reports[i], errs[i] = s.Sweep(t.Context()) })
	}
	waitWaiters(t, s, callers)
	close(release)
	wg.Wait()

	for i := range callers {
		if errs[i] != nil || reports[i] != reports[0] {
			t.Fatalf("caller %d: report %p (first %p), error %v", i, reports[i], reports[0], errs[i])
		}
	}
	if len(reports[0].RemovedSandboxes) != 5 || len(reports[0].RemovedVolumes) != 5 {
		t.Errorf("report %+v, want 5 pairs removed", reports[0])
	}
	if n := listings(f); n != 2 {
		t.Errorf("%d listings for %d concurrent callers, want 2", n, callers)
	}

	before := len(f.log())
	r, err := s.Sweep(t.Context())
	if err != nil || r != reports[0] || len(f.log()) != before {
		t.Errorf("after success: report %p, error %v, %d new msb calls", r, err, len(f.log())-before)
	}
}

func TestSweeperRetriesAfterFailure(t *testing.T) {
	f := newFakeRunner()
	n := f.addSession(1, stale)
	f.failList = 1
	s := NewSweeper(msb.NewClient(f), options)

	if r, err := s.Sweep(t.Context()); err == nil || r != nil {
		t.Fatalf("failed listing: report %v, error %v", r, err)
	}
	// A failed removal fails the sweep too, with its report.
	f.fail[n.Sandbox] = "internal error: vm did not stop"
	r, err := s.Sweep(t.Context())
	if err == nil || r == nil || len(r.Errors) != 1 {
		t.Fatalf("failed removal: report %v, error %v", r, err)
	}
	delete(f.fail, n.Sandbox)
	r, err = s.Sweep(t.Context())
	if err != nil || len(r.RemovedSandboxes) != 1 || len(r.RemovedVolumes) != 1 {
		t.Fatalf("retry: report %+v, error %v", r, err)
	}
	c := count(f.log())
	if c["list"] != 3 || c["volume list"] > 3 {
		t.Errorf("invocations %v, want 3 sweeps' listings", c)
	}
	before := len(f.log())
	if _, err := s.Sweep(t.Context()); err != nil || len(f.log()) != before {
		t.Errorf("after success: error %v, %d new msb calls", err, len(f.log())-before)
	}
}

func TestSweeperCallerLeavesOthersWait(t *testing.T) {
	f := newFakeRunner()
	f.addSession(1, stale)
	release := make(chan struct{})
	holdList(f, release)
	s := NewSweeper(msb.NewClient(f), options)

	ctx, cancel := context.WithCancel(t.Context())
	leaving := make(chan error)
	go func() {
		_, err := s.Sweep(ctx)
		leaving <- err
	}()
	staying := make(chan error)
	go func() {
		_, err := s.Sweep(t.Context())
		staying <- err
	}()
	waitWaiters(t, s, 2)
	cancel()
	if err := <-leaving; !errors.Is(err, context.Canceled) {
		t.Errorf("leaving caller: %v, want context.Canceled", err)
	}
	close(release)
	if err := <-staying; err != nil {
		t.Errorf("staying caller: %v; the shared sweep was cancelled", err)
	}
	if n := listings(f); n != 2 {
		t.Errorf("%d listings, want one sweep's 2", n)
	}
}

func TestSweeperLastCallerCancels(t *testing.T) {
	f := newFakeRunner()
	f.addSession(1, stale)
	cancelled := make(chan struct{})
	f.hook = func(ctx context.Context, argv []string) error {
		if argv[0] != "list" {
			return nil
		}
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	}
	s := NewSweeper(msb.NewClient(f), options)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		_, err := s.Sweep(ctx)
		done <- err
	}()
	waitWaiters(t, s, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("caller: %v, want context.Canceled", err)
	}
	<-cancelled // the sweep's own msb call saw the cancellation

	f.mu.Lock()
	f.hook = nil
	f.mu.Unlock()
	r, err := s.Sweep(t.Context())
	if err != nil || len(r.RemovedSandboxes) != 1 {
		t.Errorf("next sweep: report %+v, error %v", r, err)
	}
	if got := f.sandboxNames(); len(got) != 0 {
		t.Errorf("sandboxes left %q, want none", got)
	}
}
