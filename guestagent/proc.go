//go:build linux

package guestagent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// survivorGrace is how long a killed call's output may still drain from
// pipes that a process which survived the kill holds open.
const survivorGrace = 100 * time.Millisecond

// proc is one call.
type proc struct {
	s     *Server
	run   *agentwire.Run
	stdin *stdinQueue

	killOnce sync.Once
	killed   chan struct{} // closed by kill
	timedOut bool          // set before killed closes

	outMu    sync.Mutex
	total    int64
	overflow bool
	dropped  bool // the exit frame is sent or about to be: nothing more
}

func (s *Server) newProc(run *agentwire.Run) *proc {
	p := &proc{s: s, run: run, killed: make(chan struct{})}
	p.stdin = newStdinQueue(run.Stdin)
	return p
}

// kill asks for the call's processes to be killed (the first time);
// serve does it, and the call ends once they have died. It never blocks.
func (p *proc) kill(timedOut bool) {
	p.killOnce.Do(func() {
		p.timedOut = timedOut
		close(p.killed)
	})
}

// callsRunning counts the calls the agent runs, on every connection.
var callsRunning atomic.Int64

// serve runs the call to its end and sends its exit frame.
func (p *proc) serve() {
	callsRunning.Add(1)
	exit := p.execute()
	callsRunning.Add(-1)
	exit.ID = p.run.ID
	p.outMu.Lock()
	p.dropped = true
	exit.Overflow = p.overflow && exit.Error == ""
	p.outMu.Unlock()
	if exit.Overflow || exit.Error != "" {
		exit.TimedOut = false
	}
	if err := p.s.out.write(exit); err != nil {
		p.s.logf("call %d: writing its exit: %v", p.run.ID, err)
	}
}

func (p *proc) execute() *agentwire.Exit {
	startFailed := func(err error) *agentwire.Exit {
		p.stdin.abandon()
		return &agentwire.Exit{Code: 1, Error: errorText(err, agentwire.MaxErrorBytes)}
	}
	user := p.run.User
	if user == "" {
		user = p.s.DefaultUser
	}
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	id := identity{uint32(os.Geteuid()), uint32(os.Getegid())}
	if user != "" {
		var err error
		if id, err = lookupUser(p.s.Etc, user); err != nil {
			return startFailed(err)
		}
		if cred := credential(id); cred != nil {
			attr.Credential = cred
		}
	}
	dir := p.run.Workdir
	if dir == "" {
		dir = p.s.DefaultWorkdir
	}
	if p.run.Builtin != "" {
		fn := builtins[p.run.Builtin]
		if fn == nil {
			return startFailed(fmt.Errorf("unknown builtin %q", p.run.Builtin))
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			// As for a script: msb's agent gives 255 and no output.
			p.stdin.abandon()
			return &agentwire.Exit{Code: 255}
		}
		if p.run.TimeoutMS > 0 {
			t := time.AfterFunc(time.Duration(p.run.TimeoutMS)*time.Millisecond, func() { p.kill(true) })
			defer t.Stop()
		}
		return p.runBuiltin(fn, id, attr.Credential, dir)
	}

	args := []string{"bash", "-c", string(p.run.Script), "bash"}
	for _, a := range p.run.Args {
		args = append(args, string(a))
	}
	cmd := &exec.Cmd{Path: p.s.Shell, Args: args, Env: os.Environ(), SysProcAttr: attr}
	joinCommands(cmd)
	outR, outW, err := os.Pipe()
	if err != nil {
		return startFailed(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return startFailed(err)
	}
	defer outR.Close()
	defer errR.Close()
	cmd.Stdout, cmd.Stderr = outW, errW
	var inR, inW *os.File
	if p.run.Stdin {
		if inR, inW, err = os.Pipe(); err != nil {
			outW.Close()
			errW.Close()
			return startFailed(err)
		}
		cmd.Stdin = inR
	}
	err = startIn(cmd, dir, nil)
	// The child holds its ends now; without ours, a command that closes
	// its stdin makes the feeder's writes fail instead of block.
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	if err != nil {
		if inW != nil {
			inW.Close()
		}
		if errors.Is(err, errWorkdir) {
			// msb's own agent dies on a missing workdir: exit 255, no output.
			p.stdin.abandon()
			return &agentwire.Exit{Code: 255}
		}
		return startFailed(fmt.Errorf("starting %s: %w", p.s.Shell, err))
	}

	var feeding sync.WaitGroup
	if inW != nil {
		feeding.Add(1)
		go func() {
			defer feeding.Done()
			p.feedStdin(inW)
		}()
	} else {
		p.stdin.abandon()
	}
	if p.run.TimeoutMS > 0 {
		t := time.AfterFunc(time.Duration(p.run.TimeoutMS)*time.Millisecond, func() { p.kill(true) })
		defer t.Stop()
	}

	var relaying sync.WaitGroup
	for fd, r := range map[int]*os.File{1: outR, 2: errR} {
		relaying.Add(1)
		go func() {
			defer relaying.Done()
			p.relay(fd, r)
		}()
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	drained := make(chan struct{})
	go func() { relaying.Wait(); <-exited; close(drained) }()

	select {
	case <-drained:
	case <-p.killed:
		killTree(cmd.Process, cmd.Process.Pid)
		<-exited
		select {
		case <-drained:
		case <-time.After(survivorGrace):
		}
	}
	// Survivors of a kill (or of a call killed just as it ended) may hold
	// the pipes: stop relaying and stop feeding stdin.
	p.outMu.Lock()
	p.dropped = true
	p.outMu.Unlock()
	outR.Close()
	errR.Close()
	p.stdin.abandon()
	if inW != nil {
		inW.Close()
	}
	<-exited
	relaying.Wait()
	feeding.Wait()
	exit := &agentwire.Exit{Code: exitCode(cmd.ProcessState)}
	select {
	case <-p.killed:
		exit.TimedOut = p.timedOut
	default:
	}
	return exit
}

// exitCode reports a signal death as 255, as msb does, and so a wait that
// failed.
func exitCode(st *os.ProcessState) int {
	if st == nil {
		// The wait failed (its status was taken elsewhere): the call must
		// still answer, and the agent must not panic for every call.
		return 255
	}
	ws := st.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 255
	}
	return ws.ExitStatus()
}

// relay sends what the command writes on fd as out frames, counting it
// against the call's cap.
func (p *proc) relay(fd int, r *os.File) {
	buf := make([]byte, agentwire.MaxChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 && !p.emit(fd, buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// emit sends one chunk unless the call is past its cap or ending; false
// means stop relaying.
func (p *proc) emit(fd int, data []byte) bool {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	if p.dropped || p.overflow {
		return false
	}
	if room := p.run.MaxOutput - p.total; int64(len(data)) > room {
		data = data[:room]
		p.overflow = true
		p.kill(false)
	}
	p.total += int64(len(data))
	if len(data) > 0 {
		if p.s.out.write(&agentwire.Out{ID: p.run.ID, FD: fd, Data: data}) != nil {
			return false
		}
	}
	return !p.overflow
}

// ack tells the host n more stdin bytes left the queue, unless the call is
// ending.
func (p *proc) ack(n int) {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	if !p.dropped {
		_ = p.s.out.write(&agentwire.Ack{ID: p.run.ID, N: int64(n)})
	}
}

// feedStdin writes the queued stdin to the command; once it stops reading
// (a write fails) the rest is acknowledged and dropped.
func (p *proc) feedStdin(w *os.File) {
	broken := false
	for {
		data, ok := p.stdin.next()
		if !ok {
			break
		}
		if !broken {
			if _, err := w.Write(data); err != nil {
				broken = true
			}
		}
		p.ack(len(data))
	}
	w.Close()
}

func credential(id identity) *syscall.Credential {
	if os.Geteuid() != 0 && uint32(os.Geteuid()) == id.uid && uint32(os.Getegid()) == id.gid {
		return nil // already that user (an unprivileged agent, in tests)
	}
	return &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}
}

// errorText makes err fit an exit frame: valid UTF-8 (JSON would change
// other bytes) and at most n bytes, cut at a rune boundary.
func errorText(err error, n int) string {
	s := strings.ToValidUTF8(err.Error(), "?")
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// stdinQueue holds a call's stdin between the frame reader, which must
// never block, and the goroutine writing it to the command.
type stdinQueue struct {
	mu        sync.Mutex
	wanted    bool // the run frame announced stdin
	chunks    [][]byte
	size      int
	eof       bool
	abandoned bool
	wake      chan struct{}
}

func newStdinQueue(wanted bool) *stdinQueue {
	return &stdinQueue{wanted: wanted, wake: make(chan struct{}, 1)}
}

var errNoStdin = errors.New("stdin frame for a call started without stdin")

func (q *stdinQueue) push(data []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case !q.wanted:
		return errNoStdin
	case q.eof:
		return errors.New("stdin frame after eof")
	case q.size+len(data) > agentwire.MaxStdinQueue:
		return fmt.Errorf("stdin beyond the %d bytes the agent queues", agentwire.MaxStdinQueue)
	case q.abandoned:
		return nil
	}
	q.chunks = append(q.chunks, data)
	q.size += len(data)
	q.poke()
	return nil
}

func (q *stdinQueue) close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case !q.wanted:
		return errNoStdin
	case q.eof:
		return errors.New("a second eof")
	}
	q.eof = true
	q.poke()
	return nil
}

// abandon drops what is queued and what comes later: the command ended.
func (q *stdinQueue) abandon() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.abandoned = true
	q.chunks, q.size = nil, 0
	q.poke()
}

func (q *stdinQueue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// next waits for the next chunk; false at eof or once abandoned.
func (q *stdinQueue) next() ([]byte, bool) {
	for {
		q.mu.Lock()
		switch {
		case q.abandoned:
			q.mu.Unlock()
			return nil, false
		case len(q.chunks) > 0:
			data := q.chunks[0]
			q.chunks = q.chunks[1:]
			q.size -= len(data)
			q.mu.Unlock()
			return data, true
		case q.eof:
			q.mu.Unlock()
			return nil, false
		}
		q.mu.Unlock()
		<-q.wake
	}
}
