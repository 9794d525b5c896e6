//go:build linux

package guestagent

import (
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// agentHost drives a Server in this process frame by frame, so that a
// test can act on the guest between a call's frames.
type agentHost struct {
	t      *testing.T
	in     *io.PipeWriter
	frames chan agentwire.Frame
	served chan error
	out    map[uint64]string // each call's stdout and stderr as they came
	tagged map[uint64]string // the same, each chunk after "1:" or "2:"
	exits  map[uint64]*agentwire.Exit
}

// startAgentHost starts a Server whose calls default to workdir.
func startAgentHost(t *testing.T, workdir string) *agentHost {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &agentHost{t: t, in: inW, frames: make(chan agentwire.Frame, 1024), served: make(chan error, 1),
		out: map[uint64]string{}, tagged: map[uint64]string{}, exits: map[uint64]*agentwire.Exit{}}
	s := &Server{In: inR, Out: outW, DefaultWorkdir: workdir, Etc: "/etc", Shell: "/bin/bash"}
	go func() {
		h.served <- s.Serve()
		outW.Close()
	}()
	go func() {
		defer close(h.frames)
		r := agentwire.NewGuestReader(outR)
		for {
			f, err := r.Read()
			if err != nil {
				return
			}
			h.frames <- f
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case err := <-h.served:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return")
		}
		inR.Close()
		for range h.frames {
		}
	})
	return h
}

func (h *agentHost) send(f agentwire.Frame) {
	h.t.Helper()
	b, err := agentwire.Append(nil, f)
	require.NoError(h.t, err)
	_, err = h.in.Write(b)
	require.NoError(h.t, err)
}

// waitFor reads frames until call id's exit, failing the test when none
// comes within d.
func (h *agentHost) waitFor(id uint64, d time.Duration) *agentwire.Exit {
	h.t.Helper()
	deadline := time.After(d)
	for h.exits[id] == nil {
		select {
		case f, ok := <-h.frames:
			if !ok {
				h.t.Fatalf("the agent ended before call %d did", id)
			}
			switch f := f.(type) {
			case *agentwire.Out:
				h.out[f.ID] += string(f.Data)
				h.tagged[f.ID] += strconv.Itoa(f.FD) + ":" + string(f.Data)
			case *agentwire.Exit:
				h.exits[f.ID] = f
			}
		case <-deadline:
			h.t.Fatalf("call %d did not end", id)
		}
	}
	return h.exits[id]
}
