//go:build linux

// Package guestagent is oma-guest-agent's server: it runs in the guest as
// root, reads run, stdin, eof and kill frames on its stdin and answers
// with out, ack and exit frames on its stdout (package agentwire), running
// each call as `/bin/bash -c SCRIPT bash ARGS...` the way `msb exec` does.
package guestagent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// Server serves one channel.
type Server struct {
	In  io.Reader // the host's frames
	Out io.Writer // the agent's frames
	Log io.Writer // short diagnostics; nil discards them
	// DefaultUser is the user of a call that names none (msb's
	// config.user); "" runs calls as the agent's own user.
	DefaultUser string
	// DefaultWorkdir is the workdir of a call that names none.
	DefaultWorkdir string
	// Etc holds the passwd and group files users are resolved with.
	Etc string
	// Shell runs each call's script: Shell -c SCRIPT bash ARGS...
	Shell string
	// MaxCalls bounds the calls in flight, and so what the host can make
	// the agent hold; a run beyond it answers an exit error.
	MaxCalls int

	out   frameWriter
	mu    sync.Mutex
	calls map[uint64]*proc
}

// DefaultMaxCalls is Server.MaxCalls when it is 0.
const DefaultMaxCalls = 256

// drainTimeout bounds how long Serve waits, once its input ended, for the
// calls it killed to report.
const drainTimeout = 5 * time.Second

// Serve writes the hello, then serves calls concurrently until In ends
// (nil: every call in flight is killed) or the host breaks the protocol
// (that error, after the same kills).
func (s *Server) Serve() error {
	s.out = frameWriter{w: agentwire.NewWriter(s.Out)}
	s.calls = map[uint64]*proc{}
	if err := s.out.write(&agentwire.Hello{Version: agentwire.Version, PID: os.Getpid(), Revision: revision, Builtins: BuiltinNames()}); err != nil {
		return fmt.Errorf("writing hello: %w", err)
	}
	var running sync.WaitGroup
	err := s.loop(&running)
	s.mu.Lock()
	for _, p := range s.calls {
		p.kill(false)
	}
	s.mu.Unlock()
	drained := make(chan struct{})
	go func() { running.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		s.logf("calls still running after %s", drainTimeout)
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (s *Server) loop(running *sync.WaitGroup) error {
	r := agentwire.NewHostReader(s.In)
	maxCalls := s.MaxCalls
	if maxCalls <= 0 {
		maxCalls = DefaultMaxCalls
	}
	var lastID uint64
	for {
		f, err := r.Read()
		if err != nil {
			return err
		}
		if run, ok := f.(*agentwire.Run); ok {
			if run.ID <= lastID {
				return fmt.Errorf("run frame for call %d after call %d", run.ID, lastID)
			}
			lastID = run.ID
			p := s.newProc(run)
			s.mu.Lock()
			full := len(s.calls) >= maxCalls
			if !full {
				s.calls[run.ID] = p
			}
			s.mu.Unlock()
			if full {
				msg := fmt.Sprintf("more than %d calls in flight", maxCalls)
				if err := s.out.write(&agentwire.Exit{ID: run.ID, Code: 1, Error: msg}); err != nil {
					s.logf("call %d: writing its exit: %v", run.ID, err)
				}
				continue
			}
			running.Add(1)
			go func() {
				defer running.Done()
				p.serve()
				s.mu.Lock()
				delete(s.calls, run.ID)
				s.mu.Unlock()
			}()
			continue
		}
		id := agentwire.CallID(f)
		if id > lastID {
			return fmt.Errorf("%s frame for call %d, which was never started", agentwire.Type(f), id)
		}
		s.mu.Lock()
		p := s.calls[id]
		s.mu.Unlock()
		if p == nil {
			continue // the call has ended; the host had not heard yet
		}
		switch f := f.(type) {
		case *agentwire.Stdin:
			if err := p.stdin.push(f.Data); err != nil {
				return fmt.Errorf("call %d: %w", id, err)
			}
		case *agentwire.EOF:
			if err := p.stdin.close(); err != nil {
				return fmt.Errorf("call %d: %w", id, err)
			}
		case *agentwire.Kill:
			p.kill(false)
		}
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.Log != nil {
		fmt.Fprintf(s.Log, "oma-guest-agent: "+format+"\n", args...)
	}
}

// frameWriter serializes frames onto the agent's stdout: a frame is one
// Write, never interleaved with another. After a write error it drops
// every frame: the host is gone.
type frameWriter struct {
	mu     sync.Mutex
	w      *agentwire.Writer
	broken error
}

func (fw *frameWriter) write(f agentwire.Frame) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.broken != nil {
		return fw.broken
	}
	fw.broken = fw.w.Write(f)
	return fw.broken
}
