//go:build linux

package guestagent

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
)

// Each connection is a channel of its own: both answer at once, a call
// ends with its connection while the other connection's call runs on,
// and a process a call left in the background outlives the call's
// connection. A connection beyond the bound is closed unserved.
func TestServeConns(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		served <- ServeConns(ln, 2, io.Discard, func(rw io.ReadWriter) *Server {
			return &Server{In: rw, Out: rw, Etc: "/etc", Shell: "/bin/bash", DefaultWorkdir: dir}
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func() (*agentchan.Conn, net.Conn) {
		t.Helper()
		c, err := net.Dial("unix", filepath.Join(dir, "agent.sock"))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := agentchan.Open(ctx, c, c)
		if err != nil {
			t.Fatalf("opening a channel: %v", err)
		}
		return conn, c
	}
	a, _ := open()
	b, bRaw := open()

	// A call on b that would run for a minute, and a background sleep.
	bg := filepath.Join(dir, "bg.pid")
	long := filepath.Join(dir, "long.pid")
	started := make(chan error, 1)
	go func() {
		_, err := b.Run(ctx, agentchan.Request{Script: `sleep 300 & echo $! > "$1"; echo $$ > "$2"; sleep 60`, Args: []string{bg, long}}, agentchan.Output{})
		started <- err
	}()
	waitFile(t, long)
	bRaw.Close()
	if err := <-started; err == nil {
		t.Fatal("a call whose connection closed returned no error")
	}
	if pid := pidIn(t, long); waitGone(pid, 5*time.Second) != nil {
		t.Fatalf("call %d outlived its connection", pid)
	}
	bgPID := pidIn(t, bg)
	if syscall.Kill(bgPID, 0) != nil {
		t.Fatal("the call's background process died with its connection")
	}
	t.Cleanup(func() { syscall.Kill(bgPID, syscall.SIGKILL) })

	res, err := a.Run(ctx, agentchan.Request{Script: "echo still here"}, agentchan.Output{})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "still here" {
		t.Fatalf("the other channel: %v %+v", err, res)
	}

	// a and a new c fill the bound of 2; a third is refused.
	c, _ := open()
	d, err := net.Dial("unix", filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	d.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := d.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a connection beyond the bound read %d bytes, %v; want it closed", n, err)
	}
	d.Close()

	a.Close()
	c.Close()
	ln.Close()
	if err := <-served; err != nil {
		t.Fatalf("ServeConns after its listener closed: %v", err)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if data, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(data), "\n") {
			return
		}
	}
	t.Fatalf("%s never written", path)
}

func pidIn(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, r := range strings.TrimSpace(string(data)) {
		pid = pid*10 + int(r-'0')
	}
	return pid
}

func waitGone(pid int, within time.Duration) error {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
	}
	return syscall.EBUSY
}
