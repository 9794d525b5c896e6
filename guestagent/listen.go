//go:build linux

package guestagent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// DefaultMaxConns bounds the channels ServeConns serves at once.
const DefaultMaxConns = 64

// ServeConns serves each connection ln accepts as a channel of its own
// (a Server from newServer, over the connection), until ln fails (a
// moment out of descriptors or memory is waited out, not a failure); a
// connection's calls end with it, as a channel's end with its input,
// while the processes they left in the background stay. A connection
// beyond maxConns is closed unserved. It is how a local session's
// sandbox, which outlives the process that started it, serves every
// process that attaches to it.
func ServeConns(ln net.Listener, maxConns int, log io.Writer, newServer func(rw io.ReadWriter) *Server) error {
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	var (
		mu     sync.Mutex
		active int
		wg     sync.WaitGroup
	)
	defer wg.Wait()
	var pause time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of descriptors or memory for a moment (calls in flight
			// on every channel): wait and accept again, as net/http does,
			// rather than end the agent and its sandbox with it.
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				if log != nil {
					fmt.Fprintf(log, "oma-guest-agent: accepting a channel: %v; again in %s\n", err, pause)
				}
				time.Sleep(pause)
				continue
			}
			return fmt.Errorf("accepting a channel: %w", err)
		}
		pause = 0
		mu.Lock()
		full := active >= maxConns
		if !full {
			active++
		}
		mu.Unlock()
		if full {
			if log != nil {
				fmt.Fprintf(log, "oma-guest-agent: more than %d channels at once; one refused\n", maxConns)
			}
			conn.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newServer(conn)
			if err := s.Serve(); err != nil {
				s.logf("channel: %v", err)
			}
			conn.Close()
			mu.Lock()
			active--
			mu.Unlock()
		}()
	}
}
