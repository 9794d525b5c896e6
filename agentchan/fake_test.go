package agentchan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// fakeAgent plays a (possibly lying) agent on the other end of pipes.
type fakeAgent struct {
	t      *testing.T
	out    *io.PipeWriter    // what the agent writes
	in     *agentwire.Reader // what the host wrote
	inPipe *io.PipeReader
}

func openFake(t *testing.T) (*Conn, *fakeAgent) {
	t.Helper()
	return openFakeHello(t, `{"type":"hello","version":1,"pid":42}`)
}

// openFakeHello is openFake with the agent's hello line.
func openFakeHello(t *testing.T, hello string) (*Conn, *fakeAgent) {
	t.Helper()
	hostR, agentW := io.Pipe()
	agentR, hostW := io.Pipe()
	f := &fakeAgent{t: t, out: agentW, in: agentwire.NewHostReader(agentR), inPipe: agentR}
	go f.send(hello)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Open(ctx, hostR, hostW)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		agentW.Close()
		agentR.Close()
	})
	return c, f
}

// send writes lines as the agent; errors mean the host closed its end.
func (f *fakeAgent) send(lines ...string) {
	for _, l := range lines {
		if _, err := io.WriteString(f.out, l+"\n"); err != nil {
			return
		}
	}
}

// next returns the next frame the host sent.
func (f *fakeAgent) next() agentwire.Frame {
	f.t.Helper()
	fr, err := f.in.Read()
	if err != nil {
		f.t.Errorf("reading the host's frames: %v", err)
		return nil
	}
	return fr
}

type runResult struct {
	res *Result
	err error
}

func goRun(ctx context.Context, c *Conn, req Request, out Output) <-chan runResult {
	done := make(chan runResult, 1)
	go func() {
		res, err := c.Run(ctx, req, out)
		done <- runResult{res, err}
	}()
	return done
}

func wait(t *testing.T, done <-chan runResult) runResult {
	t.Helper()
	return waitFor(t, done, 5*time.Second)
}

// waitFor is wait with a bound of its own, for calls whose frames take
// long to build on a loaded machine under the race detector.
func waitFor(t *testing.T, done <-chan runResult, bound time.Duration) runResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(bound):
		t.Fatal("Run did not return")
		return runResult{}
	}
}

// secondCallWorks runs a second call (id 2) on c, which the fake agent
// answers with exit 0: the channel survived what the first call did.
func secondCallWorks(t *testing.T, c *Conn, f *fakeAgent) {
	t.Helper()
	done := goRun(context.Background(), c, Request{Script: "y"}, Output{})
	if run, ok := f.next().(*agentwire.Run); !ok || run.ID != 2 {
		t.Fatalf("the second call's frame: %+v", run)
	}
	f.send(`{"type":"exit","id":2,"code":0}`)
	if r := wait(t, done); r.err != nil {
		t.Fatalf("the channel died: %v", r.err)
	}
}

func TestFakeHappyPath(t *testing.T) {
	c, f := openFake(t)
	if c.AgentPID() != 42 {
		t.Fatalf("pid %d", c.AgentPID())
	}
	done := goRun(context.Background(), c, Request{Script: "x", Args: []string{"a\xff"}}, Output{})
	run := f.next().(*agentwire.Run)
	if string(run.Script) != "x" || string(run.Args[0]) != "a\xff" || run.MaxOutput != DefaultMaxOutput || run.Stdin {
		t.Fatalf("run frame %+v", run)
	}
	f.send(`{"type":"out","id":1,"fd":1,"data":"aGk="}`, `{"type":"out","id":1,"fd":2,"data":"ZQ=="}`, `{"type":"exit","id":1,"code":7}`)
	r := wait(t, done)
	if r.err != nil || r.res.ExitCode != 7 || string(r.res.Stdout) != "hi" || string(r.res.Stderr) != "e" {
		t.Fatalf("got %+v, %v", r.res, r.err)
	}
}

// The host counts output itself: an agent ignoring max_output is cut off
// at the cap and told to kill the call.
func TestHostCountsOutput(t *testing.T) {
	c, f := openFake(t)
	done := goRun(context.Background(), c, Request{Script: "x", MaxOutput: 5}, Output{})
	f.next()
	f.send(`{"type":"out","id":1,"fd":1,"data":"MTIz"}`, `{"type":"out","id":1,"fd":1,"data":"NDU2Nzg5"}`)
	r := wait(t, done)
	if !errors.Is(r.err, ErrOutputOverflow) || string(r.res.Stdout) != "12345" {
		t.Fatalf("got %+v, %v", r.res, r.err)
	}
	if k, ok := f.next().(*agentwire.Kill); !ok || k.ID != 1 {
		t.Fatalf("no kill after the overflow")
	}
	// What it still sends for the call is dropped, then its exit.
	f.send(`{"type":"out","id":1,"fd":1,"data":"MTIz"}`, `{"type":"exit","id":1,"code":255}`)
	secondCallWorks(t, c, f)
}

// Every protocol violation kills the channel: the call in flight and every
// later one fail with ErrBroken naming the reason.
func TestViolationsBreakTheChannel(t *testing.T) {
	cases := []struct{ name, line, want string }{
		{"garbage", "garbage", "bad frame"},
		{"never started", `{"type":"exit","id":9,"code":0}`, "call 9, which was never started"},
		{"exit twice", `{"type":"exit","id":1,"code":0}` + "\n" + `{"type":"exit","id":1,"code":0}`, "call 1, which has ended"},
		{"out after exit", `{"type":"exit","id":1,"code":0}` + "\n" + `{"type":"out","id":1,"fd":1,"data":"YQ=="}`, "call 1, which has ended"},
		{"ack beyond stdin", `{"type":"ack","id":1,"n":3}`, "ack of 3 bytes"},
		{"second hello", `{"type":"hello","version":1,"pid":42}`, "a second hello"},
		{"overlong line", strings.Repeat("x", agentwire.MaxGuestLine+1), "too long"},
		{"end of output", "", "output ended"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, f := openFake(t)
			ctx := context.Background()
			done := goRun(ctx, c, Request{Script: "x"}, Output{})
			f.next()
			if tc.line == "" {
				f.out.Close()
			} else {
				go f.send(tc.line)
			}
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the channel lives on")
			}
			if !errors.Is(c.Err(), ErrBroken) || !strings.Contains(c.Err().Error(), tc.want) {
				t.Fatalf("Err() = %v, want ErrBroken with %q", c.Err(), tc.want)
			}
			if r := wait(t, done); tc.name != "exit twice" && tc.name != "out after exit" && !errors.Is(r.err, ErrBroken) {
				t.Fatalf("the call in flight: %v", r.err)
			}
			start := time.Now()
			if _, err := c.Run(ctx, Request{Script: "y"}, Output{}); !errors.Is(err, ErrBroken) || time.Since(start) > time.Second {
				t.Fatalf("a later Run: %v after %s", err, time.Since(start))
			}
		})
	}
}

// ctx ending returns at once, tells the agent to kill the call, and what
// the agent still sends for it is dropped.
func TestContextEndGivesUp(t *testing.T) {
	c, f := openFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := goRun(ctx, c, Request{Script: "x"}, Output{})
	f.next()
	cancel()
	if r := wait(t, done); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("got %v", r.err)
	}
	if k, ok := f.next().(*agentwire.Kill); !ok || k.ID != 1 {
		t.Fatal("no kill")
	}
	f.send(`{"type":"out","id":1,"fd":1,"data":"YQ=="}`, `{"type":"exit","id":1,"code":255}`)
	secondCallWorks(t, c, f)
	// After its exit, the call's id is no longer quietly accepted.
	f.send(`{"type":"exit","id":1,"code":255}`)
	<-c.Done()
}

func TestOpenRefuses(t *testing.T) {
	for _, tc := range []struct{ name, first, want string }{
		{"version", `{"type":"hello","version":2,"pid":1}`, "protocol version 2"},
		{"not hello", `{"type":"exit","id":1,"code":0}`, "before hello"},
		{"nothing", "", "waiting for the agent's hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hostR, agentW := io.Pipe()
			agentR, hostW := io.Pipe()
			defer agentW.Close()
			defer agentR.Close()
			if tc.first != "" {
				go io.WriteString(agentW, tc.first+"\n")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := Open(ctx, hostR, hostW)
			if !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRunRefusesBadRequests(t *testing.T) {
	c, _ := openFake(t)
	for _, req := range []Request{
		{Script: "a\x00b"},
		{Args: []string{"\x00"}},
		{Workdir: "relative"},
		{Timeout: -time.Second},
		{MaxOutput: -1},
		{Script: strings.Repeat("x", agentwire.MaxArgBytes+1)},
	} {
		if _, err := c.Run(context.Background(), req, Output{}); err == nil || errors.Is(err, ErrBroken) {
			t.Fatalf("%.40v: got %v", req, err)
		}
	}
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
}

// Stdin is sent in chunks and never more than the window ahead of the
// agent's acks: with a full window, nothing more comes until an ack.
func TestStdinWindow(t *testing.T) {
	c, f := openFake(t)
	in := bytes.Repeat([]byte("s"), 3*agentwire.MaxStdinQueue)
	done := goRun(context.Background(), c, Request{Script: "x", Stdin: bytes.NewReader(in)}, Output{})
	if !f.next().(*agentwire.Run).Stdin {
		t.Fatal("run frame without stdin")
	}
	frames := make(chan agentwire.Frame)
	go func() {
		for {
			fr, err := f.in.Read()
			if err != nil {
				close(frames)
				return
			}
			frames <- fr
		}
	}()
	var got []byte
	outstanding := 0
	for len(got) < len(in) {
		s, ok := (<-frames).(*agentwire.Stdin)
		if !ok {
			t.Fatal("not a stdin frame")
		}
		got = append(got, s.Data...)
		if outstanding += len(s.Data); outstanding < agentwire.MaxStdinQueue {
			continue
		}
		select {
		case fr := <-frames:
			t.Fatalf("a %s frame with %d bytes unacknowledged", agentwire.Type(fr), outstanding)
		case <-time.After(100 * time.Millisecond):
		}
		f.send(`{"type":"ack","id":1,"n":` + strconv.Itoa(outstanding) + `}`)
		outstanding = 0
	}
	if _, ok := (<-frames).(*agentwire.EOF); !ok || !bytes.Equal(got, in) {
		t.Fatal("stdin garbled or no eof")
	}
	f.send(`{"type":"exit","id":1,"code":0}`)
	if r := wait(t, done); r.err != nil {
		t.Fatal(r.err)
	}
}

func TestTimeoutRoundsUp(t *testing.T) {
	c, f := openFake(t)
	for i, tc := range []struct {
		d    time.Duration
		want int64
	}{{time.Nanosecond, 1}, {1500 * time.Microsecond, 2}, {2 * time.Second, 2000}, {0, 0}} {
		done := goRun(context.Background(), c, Request{Script: "x", Timeout: tc.d}, Output{})
		if got := f.next().(*agentwire.Run).TimeoutMS; got != tc.want {
			t.Fatalf("%s gave timeout_ms %d, want %d", tc.d, got, tc.want)
		}
		f.send(`{"type":"exit","id":` + strconv.Itoa(i+1) + `,"code":0}`)
		wait(t, done)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

// A Stdin that fails fails the call and kills it in the guest.
func TestStdinReadError(t *testing.T) {
	c, f := openFake(t)
	done := goRun(context.Background(), c, Request{Script: "x", Stdin: failingReader{}}, Output{})
	f.next()
	if r := wait(t, done); r.err == nil || !strings.Contains(r.err.Error(), "reading stdin: disk on fire") {
		t.Fatalf("got %v", r.err)
	}
	if k, ok := f.next().(*agentwire.Kill); !ok || k.ID != 1 {
		t.Fatal("no kill")
	}
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
}

// A callback that panics still gets the call killed in the guest.
func TestPanickingCallbackKillsTheCall(t *testing.T) {
	c, f := openFake(t)
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		_, _ = c.Run(context.Background(), Request{Script: "x"}, Output{Stdout: func([]byte) { panic("callback") }})
	}()
	f.next()
	f.send(`{"type":"out","id":1,"fd":1,"data":"YQ=="}`)
	if p := <-done; p != "callback" {
		t.Fatalf("recovered %v", p)
	}
	if k, ok := f.next().(*agentwire.Kill); !ok || k.ID != 1 {
		t.Fatal("no kill")
	}
}

// A request naming a builtin the hello offers travels as a run frame with
// that builtin and no script; one with both is refused before sending.
func TestBuiltinRequest(t *testing.T) {
	c, f := openFakeHello(t, `{"type":"hello","version":1,"pid":42,"builtins":["glob-enumerate"]}`)
	if !c.Offers("glob-enumerate") || c.Offers("write") {
		t.Fatalf("offers glob-enumerate %v, write %v", c.Offers("glob-enumerate"), c.Offers("write"))
	}
	ctx := context.Background()
	if _, err := c.Run(ctx, Request{Script: "true", Builtin: "glob-enumerate"}, Output{}); err == nil ||
		!strings.Contains(err.Error(), "both a script and a builtin") {
		t.Fatalf("script and builtin: %v", err)
	}
	done := goRun(ctx, c, Request{Builtin: "glob-enumerate", Args: []string{"tok", "/r"}}, Output{})
	run, ok := f.next().(*agentwire.Run)
	if !ok || run.Builtin != "glob-enumerate" || len(run.Script) != 0 || len(run.Args) != 2 || string(run.Args[1]) != "/r" {
		t.Fatalf("run frame %+v", run)
	}
	f.send(`{"type":"exit","id":` + strconv.FormatUint(run.ID, 10) + `,"code":3}`)
	if r := wait(t, done); r.err != nil || r.res.ExitCode != 3 {
		t.Fatalf("result %+v, %v", r.res, r.err)
	}
}

// countingReader is an endless stdin that counts what the host took.
type countingReader struct{ n atomic.Int64 }

func (r *countingReader) Read(p []byte) (int, error) {
	r.n.Add(int64(len(p)))
	return len(p), nil
}

// A forged agent that acks stdin it never reads (its stdin pipe full) may
// not make the host queue more: only bytes the pipe was offered can be
// acknowledged, so its second ack breaks the channel, and the host never
// took more of the upload than one window and a chunk.
func TestForgedAcksDoNotGrowTheQueue(t *testing.T) {
	c, f := openFake(t)
	in := &countingReader{}
	done := goRun(context.Background(), c, Request{Script: "x", Stdin: in}, Output{})
	f.next()         // the run frame; then the agent reads nothing more
	const acks = 512 // 16 MiB of acks
	for i := 0; i < acks && c.Err() == nil; i++ {
		f.send(`{"type":"ack","id":1,"n":` + strconv.Itoa(agentwire.MaxChunk) + `}`)
		time.Sleep(time.Millisecond)
	}
	if bound := int64(agentwire.MaxStdinQueue + 2*agentwire.MaxChunk); in.n.Load() > bound {
		t.Fatalf("the host took %d bytes of stdin from a forged agent's acks, more than %d", in.n.Load(), bound)
	}
	if !errors.Is(c.Err(), ErrBroken) || !strings.Contains(c.Err().Error(), "ack of") {
		t.Fatalf("the channel: %v", c.Err())
	}
	if r := wait(t, done); !errors.Is(r.err, ErrBroken) {
		t.Fatalf("the call: %v", r.err)
	}
}

// Whatever the number of calls, an agent that reads nothing holds the
// host's queue to its bound: stdin stops at MaxStdinQueue queued bytes for
// the whole channel, and a run frame waits (until its context ends) rather
// than queue past maxQueued.
func TestQueueIsBoundedPerChannel(t *testing.T) {
	c, _ := openFake(t) // the agent reads nothing
	var ins [8]countingReader
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs []<-chan runResult
	for i := range ins {
		runs = append(runs, goRun(ctx, c, Request{Script: "x", Stdin: &ins[i]}, Output{}))
	}
	took := settled(func() int64 {
		var n int64
		for i := range ins {
			n += ins[i].n.Load()
		}
		return n
	})
	if took > agentwire.MaxStdinQueue+int64(len(ins))*agentwire.MaxChunk {
		t.Fatalf("%d calls took %d bytes of stdin an agent never read", len(ins), took)
	}
	// Run frames wait rather than queue past maxQueued; every frame that
	// was queued is still there once their calls gave up.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	big := strings.Repeat("x", agentwire.MaxArgBytes)
	var bigs []<-chan runResult
	for range 4 {
		bigs = append(bigs, goRun(short, c, Request{Script: big}, Output{}))
	}
	for _, r := range bigs {
		if r := waitFor(t, r, 30*time.Second); !errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("a call: %v", r.err)
		}
	}
	c.mu.Lock()
	queued := c.queued
	c.mu.Unlock()
	if slack := 4 * 64; queued > maxQueued+slack { // their kill frames
		t.Fatalf("%d bytes queued for an agent that reads nothing, bound %d", queued, maxQueued)
	}
	cancel()
	for _, r := range runs {
		if r := wait(t, r); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("a call: %v", r.err)
		}
	}
}

// settled polls n until it stops changing for a while and returns it.
func settled(n func() int64) int64 {
	last := n()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		if now := n(); now != last {
			last = now
			continue
		}
		break
	}
	return last
}

// Older tells an agent older than this program by its hello: builtins of
// this version it lacks, or a lower revision; never a higher one.
func TestOlder(t *testing.T) {
	all, _ := json.Marshal(agentwire.Lacking(nil))
	for _, c := range []struct{ hello, want string }{
		{`{"type":"hello","version":1,"pid":1,"revision":` + strconv.Itoa(agentwire.Revision) + `,"builtins":` + string(all) + `}`, ""},
		{`{"type":"hello","version":1,"pid":1,"revision":` + strconv.Itoa(agentwire.Revision+1) + `,"builtins":` + string(all) + `}`, ""},
		{`{"type":"hello","version":1,"pid":1,"revision":` + strconv.Itoa(agentwire.Revision-1) + `,"builtins":` + string(all) + `}`,
			fmt.Sprintf("its revision is %d, this program's %d", agentwire.Revision-1, agentwire.Revision)},
		{`{"type":"hello","version":1,"pid":1,"builtins":` + string(all) + `}`, "its revision is 0"},
		{`{"type":"hello","version":1,"pid":1,"revision":` + strconv.Itoa(agentwire.Revision+1) + `,"builtins":["ls"]}`, "it lacks bash-kill, "},
	} {
		conn, _ := openFakeHello(t, c.hello)
		got := conn.Older()
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s: Older() = %q, want %q", c.hello, got, c.want)
		}
	}
}

// A frame for a call whose run frame is still in the host's queue is no
// answer to it: the agent has not been offered that frame, so it cannot
// end (or print for) that call, however well it guesses the next id.
func TestFrameForACallNotYetSentBreaksTheChannel(t *testing.T) {
	c, f := openFake(t) // the agent reads nothing: run 1 holds the writer
	ctx := context.Background()
	first := goRun(ctx, c, Request{Script: "x"}, Output{})
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.lastID == 1
	}, 5*time.Second, time.Millisecond)
	second := goRun(ctx, c, Request{Script: "y"}, Output{}) // queued behind run 1
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.lastID == 2
	}, 5*time.Second, time.Millisecond)

	f.send(`{"type":"exit","id":2,"code":0}`)
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the agent answered a call it was never sent, and the channel lives on")
	}
	require.ErrorIs(t, c.Err(), ErrBroken)
	require.ErrorContains(t, c.Err(), "exit frame for call 2, which was never started")
	require.ErrorIs(t, wait(t, first).err, ErrBroken)
	require.ErrorIs(t, wait(t, second).err, ErrBroken)
}

// What the host holds of a call's output while its Output callbacks are
// slow is about the output's size, however the agent cuts it: a flood of
// one-byte out frames, alternating stdout and stderr, used to cost the
// host some 40 bytes of heap a byte (a slice and an allocation each), so
// a forged agent could make a 16 MiB cap hold over half a GiB.
func TestSmallOutFramesHeldCompactly(t *testing.T) {
	c, f := openFake(t)
	release := make(chan struct{})
	var got []byte // which stream each chunk came on, in order
	slow := func(fd byte) func([]byte) {
		return func(p []byte) {
			<-release
			got = append(got, fd)
			got = append(got, p...)
		}
	}
	done := goRun(context.Background(), c, Request{Script: "x"}, Output{Stdout: slow('1'), Stderr: slow('2')})
	f.next()
	const frames = 200_000
	var b strings.Builder
	for i := range frames {
		fmt.Fprintf(&b, `{"type":"out","id":1,"fd":%d,"data":"YQ=="}`+"\n", 1+i%2)
	}
	lines := b.String()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	go f.send(strings.TrimSuffix(lines, "\n"))
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		cl := c.calls[1] // nil if the channel died
		return cl != nil && cl.total == frames
	}, 30*time.Second, time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(lines)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	require.Less(t, held, int64(8*frames), "heap held for %d bytes of output in one-byte frames", frames)

	close(release)
	f.send(`{"type":"exit","id":1,"code":0}`)
	require.NoError(t, wait(t, done).err)
	require.Equal(t, strings.Repeat("1a2a", frames/2), string(got), "the chunks or their order")
}
