package agentchan

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// A hostile agent may write anything while calls are in flight: whatever
// it writes, Run returns (a result, a typed error, or ErrBroken once its
// output ends), and nothing panics.
func FuzzConn(f *testing.F) {
	f.Add([]byte(`{"type":"out","id":1,"fd":1,"data":"aGk="}` + "\n" + `{"type":"exit","id":1,"code":0}` + "\n"))
	f.Add([]byte(`{"type":"ack","id":2,"n":3}` + "\n" + `{"type":"exit","id":2,"code":1,"error":"no"}` + "\n"))
	f.Add([]byte(`{"type":"out","id":2,"fd":2,"data":"` + string(bytes.Repeat([]byte("QUFB"), 100)) + `"}` + "\n"))
	f.Add([]byte(`{"type":"exit","id":1,"code":255,"timed_out":true}` + "\n" + `{"type":"exit","id":2,"code":0,"overflow":true}` + "\n"))
	f.Fuzz(func(t *testing.T, guest []byte) {
		hostR, agentW := io.Pipe()
		agentR, hostW := io.Pipe()
		defer agentR.Close()
		go io.Copy(io.Discard, agentR)
		go func() {
			io.WriteString(agentW, `{"type":"hello","version":1,"pid":1}`+"\n")
			agentW.Write(guest)
			agentW.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := Open(ctx, hostR, hostW)
		if err != nil {
			return
		}
		defer c.Close()
		done := make(chan error, 2)
		go func() {
			_, err := c.Run(ctx, Request{Script: "a", MaxOutput: 100}, Output{})
			done <- err
		}()
		go func() {
			_, err := c.Run(ctx, Request{Script: "b", Stdin: bytes.NewReader(make([]byte, 1000))}, Output{Stderr: func([]byte) {}})
			done <- err
		}()
		for range 2 {
			if err := <-done; errors.Is(err, context.DeadlineExceeded) {
				t.Fatal("Run hung on a hostile agent")
			}
		}
	})
}
