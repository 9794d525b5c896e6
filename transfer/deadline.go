package transfer

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// A transfer stops when no byte of it moves for stallTimeout (a guest or
// transport that hangs), and as a whole after baseTimeout plus its bytes
// at minRate, which only a guest that trickles reaches. The slowest
// transport seen, a real msb microVM under software emulation, fetched
// 8 MiB in 23 to 34 s (measured once, by a test not kept) and
// TestCollectCancelledMidFetchLeavesDestAsItWas's 3 MiB met the earlier
// 10 MiB/s deadline under CI's load; fakemsb on a loaded 2-core machine
// takes 2.3 to 4.1 s for 100 MiB (TestCollect100MiBFitsItsDeadline).
var (
	stallTimeout = 30 * time.Second
	baseTimeout  = 15 * time.Second
)

const minRate = 64 << 10 // bytes a second

// deadlines ends a transfer's context when its bytes stop moving or move
// too slowly, with a cause that says which.
type deadlines struct {
	total            time.Duration
	stall            *time.Timer
	stalled, tooSlow error
}

// withDeadlines derives the context of a transfer of n bytes; what names
// it in the errors. The returned cancel ends it early with a cause.
func withDeadlines(ctx context.Context, what string, n int64) (*deadlines, context.Context, context.CancelCauseFunc) {
	d := &deadlines{total: baseTimeout + time.Duration(n/minRate+1)*time.Second}
	d.tooSlow = fmt.Errorf("%w: %s (%d bytes) did not end within %s: %w",
		session.ErrHostTimeout, what, n, d.total, context.DeadlineExceeded)
	d.stalled = fmt.Errorf("%w: no byte of %s moved for %s: %w",
		session.ErrHostTimeout, what, stallTimeout, context.DeadlineExceeded)
	ctx, cancelTotal := context.WithTimeoutCause(ctx, d.total, d.tooSlow)
	ctx, cancel := context.WithCancelCause(ctx)
	d.stall = time.AfterFunc(stallTimeout, func() { cancel(d.stalled) })
	return d, ctx, func(cause error) {
		d.stall.Stop()
		cancel(cause)
		cancelTotal()
	}
}

// guestTimeout is the guest-side timer of the transfer's command: later
// than the host's, which speaks first.
func (d *deadlines) guestTimeout() time.Duration { return d.total + 5*time.Second }

// hold stops the stall timer while the host, not the guest, is busy.
func (d *deadlines) hold() { d.stall.Stop() }

// moved restarts the stall timer: bytes moved.
func (d *deadlines) moved() { d.stall.Reset(stallTimeout) }

// relay hands bytes that came from the guest to w: they moved, and the
// time w takes is the host's.
func (d *deadlines) relay(w io.Writer, p []byte) {
	d.hold()
	_, _ = w.Write(p)
	d.moved()
}

// ended reports whether cause, a context's, is one of these deadlines.
func (d *deadlines) ended(cause error) bool { return cause == d.stalled || cause == d.tooSlow }

// progressReader reports every read to its deadlines: the guest took
// what the previous read gave.
type progressReader struct {
	r io.Reader
	d *deadlines
}

func (p *progressReader) Read(b []byte) (int, error) {
	p.d.hold()
	n, err := p.r.Read(b)
	p.d.moved()
	return n, err
}
