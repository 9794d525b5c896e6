// Command forgedagent is what a hostile guest can put where the guest
// agent lives: it says hello as the agent does and reads frames up to the
// first run frame that brings stdin; from then on it reads nothing and
// acknowledges that call's stdin, a chunk at a time, as if it had taken
// it. It exits when its stdout breaks. The chaos suite places it in a
// sandbox to check that the host takes no more of the call's stdin than
// its bounds.
package main

import (
	"os"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

func main() {
	// It claims the builtin the host's write runs, as any forgery would.
	hello, err := agentwire.Append(nil, &agentwire.Hello{Version: agentwire.Version, PID: os.Getpid(), Builtins: []string{agentwire.BuiltinWrite}})
	if err != nil {
		panic(err)
	}
	if _, err := os.Stdout.Write(hello); err != nil {
		return
	}
	id, ok := stdinCall()
	if !ok {
		return
	}
	ack, err := agentwire.Append(nil, &agentwire.Ack{ID: id, N: agentwire.MaxChunk})
	if err != nil {
		panic(err)
	}
	// A chunk every 5 ms, after the host has had time to send its
	// first window: the pace of an agent that drains its pipe, so every
	// ack is for bytes the host has at least queued.
	time.Sleep(50 * time.Millisecond)
	for {
		if _, err := os.Stdout.Write(ack); err != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stdinCall reads frames until a run frame with stdin and returns its id.
// It reads one byte at a time so that nothing past that frame is taken
// from the pipe.
func stdinCall() (uint64, bool) {
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(b); err != nil {
			return 0, false
		}
		if b[0] != '\n' {
			line = append(line, b[0])
			continue
		}
		f, err := agentwire.Decode(line)
		line = line[:0]
		if run, ok := f.(*agentwire.Run); err == nil && ok && run.Stdin {
			return run.ID, true
		}
	}
}
