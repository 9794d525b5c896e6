package testutil

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// LoopbackServer answers `hello from NAME auth="AUTHORIZATION"` on addr, a
// loopback address of the host (the only network the tests may use), until
// the test ends, and returns its port. It skips the test when addr cannot
// be listened on.
func LoopbackServer(t testing.TB, addr, name string) int {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen %s: %v", addr, err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s auth=%q", name, r.Header.Get("Authorization"))
	}))
	s.Listener.Close()
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
	return l.Addr().(*net.TCPAddr).Port
}

// FreePort returns a loopback TCP port that was free a moment ago (it is
// listened on and released), for a server the test starts elsewhere.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// UnixEcho listens on the unix socket path until the test ends and
// answers each connection `echo:` and the first five bytes it sent, then
// closes it: a stand-in for the egress proxy behind a relay.
func UnixEcho(t testing.TB, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen %s: %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(io.LimitReader(c, 5))
				fmt.Fprintf(c, "echo:%s", b)
			}()
		}
	}()
}
