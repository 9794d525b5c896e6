package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

const (
	// startMarker is written to fd markerFD once the sandbox is up and the
	// command is about to run (by a shell wrapper, or by the guest agent
	// itself, given --ready-fd); without it, a failure is the sandbox's,
	// not the command's.
	startMarker = 'R'
	markerFD    = 3
	// drainGrace bounds how long output may trail the sandbox's exit.
	drainGrace = 2 * time.Second
	// drainLast bounds each read of what the pipes hold after drainGrace.
	drainLast  = 50 * time.Millisecond
	stderrTail = 4 << 10
)

// pump gives what it reads from r to add, while more allows another read,
// until a read fails.
func pump(r *os.File, add func([]byte), more func() bool) {
	buf := make([]byte, 32<<10)
	for more() {
		n, err := r.Read(buf)
		if n > 0 {
			add(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// runSpec is one prepared host process and how to supervise it.
type runSpec struct {
	cmd          *exec.Cmd
	marker       bool // the command reports startMarker on fd 3
	stdin        io.Reader
	stdout       func([]byte)
	stderr       func([]byte)
	maxOutput    int64
	guestTimeout time.Duration
	// start starts cmd when the platform needs more than cmd.Start; the
	// release it returns is called once the process has been waited for.
	start func(*exec.Cmd) (release func(), err error)
}

// output gathers both streams under one cap and serialises callbacks.
type output struct {
	mu       sync.Mutex
	total    int64
	max      int64
	over     bool
	cb       [2]func([]byte)
	buf      [2][]byte
	tail     []byte
	overflow func()
}

// full reports whether the cap was reached: what comes after is dropped.
func (o *output) full() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.over
}

func (o *output) add(stream int, p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.over {
		return
	}
	if stream == 1 {
		o.tail = append(o.tail, p...)
		if len(o.tail) > stderrTail {
			o.tail = append([]byte(nil), o.tail[len(o.tail)-stderrTail:]...)
		}
	}
	if room := o.max - o.total; int64(len(p)) > room {
		p = p[:room]
		o.over = true
		o.overflow()
	}
	o.total += int64(len(p))
	if len(p) == 0 {
		return
	}
	if cb := o.cb[stream]; cb != nil {
		cb(append([]byte(nil), p...))
	} else {
		o.buf[stream] = append(o.buf[stream], p...)
	}
}

// run starts rs.cmd in its own process group and supervises it: output
// cap, guest timeout, ctx deadline and cancellation all SIGKILL the group.
// On a kill the Result holds what was captured, ExitCode 137, and the
// error names the cause.
func run(ctx context.Context, rs runSpec) (*session.Result, error) {
	cmd := rs.cmd
	var pipes []*os.File
	closeAll := func() {
		for _, f := range pipes {
			f.Close()
		}
	}
	newPipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			pipes = append(pipes, r, w)
		}
		return
	}
	outR, outW, err1 := newPipe()
	errR, errW, err2 := newPipe()
	var markR, markW *os.File
	var err3 error
	if rs.marker {
		markR, markW, err3 = newPipe()
		// The marker is fd 3; the platform's own files follow it.
		cmd.ExtraFiles = append([]*os.File{markW}, cmd.ExtraFiles...)
	}
	if err := errors.Join(err1, err2, err3); err != nil {
		closeAll()
		return nil, fmt.Errorf("local sandbox: pipes: %v: %w", err, session.ErrCannotStart)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = rs.stdin, outW, errW
	cmd.WaitDelay = drainGrace
	setProcessGroup(cmd)
	release := func() {}
	var err error
	if rs.start != nil {
		release, err = rs.start(cmd)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("local sandbox: starting %s: %v: %w", cmd.Path, err, session.ErrCannotStart)
	}
	outW.Close()
	errW.Close()
	if markW != nil {
		markW.Close()
	}

	var (
		killMu  sync.Mutex
		killErr error
		exited  bool
	)
	// kill records the first cause and kills the group. Once the command
	// has exited it ran to its end: only an output overflow still counts,
	// and the reaped group is not signalled.
	kill := func(why error, afterExit bool) {
		killMu.Lock()
		defer killMu.Unlock()
		if killErr != nil || exited && !afterExit {
			return
		}
		killErr = why
		if !exited {
			killGroup(cmd.Process)
		}
	}
	max := rs.maxOutput
	out := &output{max: max, cb: [2]func([]byte){rs.stdout, rs.stderr}}
	out.overflow = func() {
		kill(fmt.Errorf("command output exceeded %d bytes and was killed: %w", max, session.ErrOutputOverflow), true)
	}
	var readers sync.WaitGroup
	for i, r := range []*os.File{outR, errR} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			pump(r, func(p []byte) { out.add(i, p) }, func() bool { return true })
		}()
	}
	started := make(chan bool, 1)
	if markR != nil {
		go func() {
			var b [1]byte
			n, _ := markR.Read(b[:])
			started <- n == 1 && b[0] == startMarker
		}()
	} else {
		started <- true
	}

	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var timeout <-chan time.Time
		if rs.guestTimeout > 0 {
			t := time.NewTimer(rs.guestTimeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ctx.Done():
			kill(ctxError(ctx), false)
		case <-timeout:
			kill(fmt.Errorf("command killed after its %s timeout: %w", rs.guestTimeout, session.ErrGuestTimeout), false)
		case <-stop:
		}
	}()

	waitErr := cmd.Wait()
	release()
	killMu.Lock()
	exited = true
	killMu.Unlock()
	close(stop)
	<-watched
	// On Linux every sandboxed process is gone with the pid namespace, so
	// the pipes close now; elsewhere a detached straggler may hold them.
	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		// Something outside the sandbox still holds a write end (a child
		// of this process between its fork and its exec), or the readers
		// fell behind: the pipes may not end soon, but all the command
		// wrote is in them by now. The readers stop; what they left is
		// taken here.
		for _, r := range []*os.File{outR, errR} {
			if r.SetReadDeadline(time.Now()) != nil {
				r.Close()
			}
		}
		<-drained
		// Each read may wait drainLast for more; none once the cap is
		// reached or drainGrace more has passed, so a writer that never
		// stops, however slowly it writes, cannot hold the call. The pipes
		// are drained at once: a writer busy on one cannot spend the
		// other's time.
		end := time.Now().Add(drainGrace)
		for i, r := range []*os.File{outR, errR} {
			readers.Add(1)
			go func() {
				defer readers.Done()
				pump(r, func(p []byte) { out.add(i, p) }, func() bool {
					return !out.full() && time.Now().Before(end) && r.SetReadDeadline(time.Now().Add(drainLast)) == nil
				})
			}()
		}
		readers.Wait()
	}
	ok := <-started
	closeAll()

	// Readers and watcher are done: killErr is final.
	res := &session.Result{ExitCode: exitCode(cmd.ProcessState), Stdout: out.buf[0], Stderr: out.buf[1]}
	if killErr != nil {
		res.ExitCode = 137
		return res, killErr
	}
	if !ok {
		msg := string(out.tail)
		if msg == "" && waitErr != nil {
			msg = waitErr.Error()
		}
		return res, fmt.Errorf("local sandbox did not start the command: %s: %w", trimMsg(msg), session.ErrCannotStart)
	}
	return res, nil
}

func ctxError(ctx context.Context) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, context.DeadlineExceeded):
		return fmt.Errorf("command killed at the host deadline: %w: %w", session.ErrHostTimeout, cause)
	case errors.Is(cause, session.ErrClosed), errors.Is(cause, session.ErrPoisoned):
		return fmt.Errorf("command killed: %w", cause)
	default:
		return fmt.Errorf("command killed: %w: %w", session.ErrAborted, cause)
	}
}

func trimMsg(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	if s == "" {
		return "no diagnostic"
	}
	return s
}
