package mcpserver

import (
	"context"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	// progressInterval coalesces output chunks: at most one round of
	// notifications per interval, so chatty output does not flood the client.
	progressInterval = 100 * time.Millisecond
	// maxProgressMessage bounds one notification's message; more pending
	// output goes out in several notifications at once.
	maxProgressMessage = 64 << 10
)

// progressSender turns a tool's streamed output into notifications/progress
// for one request: message is the output text, progress the number of
// output bytes sent so far. Output is buffered while a notification is
// being written, so a slow client never stalls the guest's output stream;
// the buffer is bounded by the tool's own output cap.
type progressSender struct {
	ctx   context.Context
	ss    *mcp.ServerSession
	token any

	mu      sync.Mutex
	pending []byte
	started bool
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	sent   int64 // owned by run
	broken bool  // owned by run: a send failed, so the client is gone
}

func newProgressSender(ctx context.Context, ss *mcp.ServerSession, token any) *progressSender {
	return &progressSender{
		ctx: ctx, ss: ss, token: token,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
}

// add queues a chunk; the sending goroutine starts with the first one.
func (p *progressSender) add(b []byte) {
	if len(b) == 0 {
		return
	}
	p.mu.Lock()
	p.pending = append(p.pending, b...)
	if !p.started {
		p.started = true
		go p.run()
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// close sends what is still pending and returns when the last notification
// is written, so that every notification precedes the call's result.
func (p *progressSender) close() {
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if started {
		close(p.stop)
		<-p.done
	}
}

func (p *progressSender) run() {
	defer close(p.done)
	timer := time.NewTimer(progressInterval)
	defer timer.Stop()
	for {
		select {
		case <-p.wake:
		case <-p.stop:
			p.flush(true)
			return
		}
		p.flush(false)
		timer.Reset(progressInterval)
		select {
		case <-timer.C:
		case <-p.stop:
			p.flush(true)
			return
		}
	}
}

// flush sends the pending output. Until the last flush it holds back an
// incomplete UTF-8 sequence at the end, so a character split between two
// chunks is not garbled.
func (p *progressSender) flush(last bool) {
	p.mu.Lock()
	out := p.pending
	keep := 0
	if !last {
		keep = incompleteSuffix(out)
	}
	p.pending = append([]byte(nil), out[len(out)-keep:]...)
	out = out[:len(out)-keep]
	p.mu.Unlock()
	for len(out) > 0 && !p.broken {
		n := messageCut(out, maxProgressMessage)
		p.sent += int64(n)
		err := p.ss.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{
			ProgressToken: p.token,
			Message:       string(out[:n]),
			Progress:      float64(p.sent),
		})
		p.broken = err != nil
		out = out[n:]
	}
}

// incompleteSuffix returns the length of a UTF-8 sequence at the end of b
// that more bytes could still complete.
func incompleteSuffix(b []byte) int {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return 0
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}

// messageCut returns how much of b goes into one message: at most max
// bytes, cut at a character boundary when one is near.
func messageCut(b []byte, max int) int {
	if len(b) <= max {
		return len(b)
	}
	for n := max; n > max-utf8.UTFMax; n-- {
		if utf8.RuneStart(b[n]) {
			return n
		}
	}
	return max
}
