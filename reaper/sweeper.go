package reaper

import (
	"context"
	"sync"

	"github.com/oma-sandbox/oma-sandbox/msb"
)

// Sweeper runs one shared sweep before the first session of a process.
//
// Concurrent callers of Sweep share one in-flight sweep. Once a sweep has
// succeeded (Reap returned no error), every later call returns its report at
// once without calling msb. A failed sweep, including one where any removal
// failed, is forgotten, and the next call starts a new one.
//
// The sweep runs on a context detached from its callers' cancellation (it
// keeps the first caller's values). A caller whose ctx ends stops waiting and
// gets ctx's error, while the sweep goes on for the callers still waiting.
// When the last waiting caller has gone the sweep is cancelled, so no msb
// call outlives every caller, and the next call starts afresh.
type Sweeper struct {
	client *msb.Client
	opts   Options

	mu   sync.Mutex
	done *Report // report of the sweep that succeeded
	cur  *flight // the sweep in flight, nil if none
}

// flight is one sweep and the callers waiting for it.
type flight struct {
	cancel  context.CancelFunc
	waiters int
	end     chan struct{} // closed when report and err are set
	report  *Report
	err     error
}

// NewSweeper returns a Sweeper that runs Reap(ctx, client, opts) once.
func NewSweeper(client *msb.Client, opts Options) *Sweeper {
	return &Sweeper{client: client, opts: opts}
}

// Sweep waits for the shared sweep, starting it if none is in flight, and
// returns its report and error. The report is shared: do not modify it.
func (s *Sweeper) Sweep(ctx context.Context) (*Report, error) {
	s.mu.Lock()
	if s.done != nil {
		s.mu.Unlock()
		return s.done, nil
	}
	f := s.cur
	if f == nil {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{cancel: cancel, end: make(chan struct{})}
		s.cur = f
		go s.run(fctx, f)
	}
	f.waiters++
	s.mu.Unlock()

	select {
	case <-f.end:
		return f.report, f.err
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if f.waiters--; f.waiters == 0 {
			f.cancel()
			if s.cur == f {
				s.cur = nil
			}
		}
		return nil, ctx.Err()
	}
}

func (s *Sweeper) run(ctx context.Context, f *flight) {
	defer f.cancel()
	report, err := Reap(ctx, s.client, s.opts)
	s.mu.Lock()
	f.report, f.err = report, err
	if err == nil {
		s.done = report
	}
	if s.cur == f {
		s.cur = nil
	}
	s.mu.Unlock()
	close(f.end)
}
