package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

type proxyFixture struct {
	addr     string
	portA    uint16 // allowed on 127.0.0.1
	portB    uint16 // refused on 127.0.0.1
	portC    uint16 // on 127.0.0.2, allowed by a CIDR
	mu       sync.Mutex
	resolved []string
	refused  []string
}

func newProxy(t *testing.T) *proxyFixture {
	t.Helper()
	f := &proxyFixture{}
	f.portA = uint16(testutil.LoopbackServer(t, "127.0.0.1:0", "A"))
	f.portB = uint16(testutil.LoopbackServer(t, "127.0.0.1:0", "B"))
	f.portC = uint16(testutil.LoopbackServer(t, "127.0.0.2:0", "C"))
	pol := Policy{}
	for _, s := range []string{
		fmt.Sprintf("127.0.0.1:%d", f.portA),
		"127.0.0.2/31",
		fmt.Sprintf("allowed.test:%d", f.portA),
		"*.suffix.test",
		fmt.Sprintf("rebind.test:%d", f.portB),
	} {
		tg, err := ParseTarget(s)
		if err != nil {
			t.Fatal(err)
		}
		pol.Allow = append(pol.Allow, tg)
	}
	p := &Proxy{
		Policy: pol,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			f.mu.Lock()
			f.resolved = append(f.resolved, host)
			f.mu.Unlock()
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		Secrets: []SecretValue{{Secret: Secret{Env: "TOKEN", Hosts: []string{"127.0.0.1", "*.suffix.test"}}, Placeholder: "oma-secret-TOKEN-ph", Value: "s3cret"}},
		Refused: func(e *RefusedError) {
			f.mu.Lock()
			f.refused = append(f.refused, string(e.Kind)+" "+e.Dest+": "+e.Reason)
			f.mu.Unlock()
		},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	t.Cleanup(func() {
		l.Close()
		p.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return f
}

// viaHTTP fetches rawURL through the proxy as a plain HTTP proxy request.
func (f *proxyFixture) viaHTTP(t *testing.T, rawURL string, header ...string) (int, string) {
	t.Helper()
	pu, _ := url.Parse("http://" + f.addr)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// viaConnect opens a CONNECT tunnel to dest and sends a GET through it.
func (f *proxyFixture) viaConnect(t *testing.T, dest string) (string, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return res.Status, string(b)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", dest)
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(inner.Body)
	return res.Status, string(b)
}

// viaSOCKS connects to host:port over SOCKS5 and returns the reply code
// and, on success, the body of a GET.
func (f *proxyFixture) viaSOCKS(t *testing.T, host string, port uint16) (byte, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := []byte{5, 1, 0}
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var sel [2]byte
	if _, err := io.ReadFull(c, sel[:]); err != nil || sel != [2]byte{5, 0} {
		t.Fatalf("method selection %v, %v", sel, err)
	}
	msg := []byte{5, 1, 0}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		msg = append(append(msg, 1), a.AsSlice()...)
	} else if err == nil {
		msg = append(append(msg, 4), a.AsSlice()...)
	} else {
		msg = append(append(msg, 3, byte(len(host))), host...)
	}
	msg = binary.BigEndian.AppendUint16(msg, port)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	var rep [10]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		t.Fatal(err)
	}
	if rep[1] != 0 {
		return rep[1], ""
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	return 0, string(b)
}

func TestProxyEnforcesThePolicy(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the proxy's and servers' cleanups
	f := newProxy(t)
	a := fmt.Sprintf("127.0.0.1:%d", f.portA)
	b := fmt.Sprintf("127.0.0.1:%d", f.portB)
	c := fmt.Sprintf("127.0.0.2:%d", f.portC)

	t.Run("http", func(t *testing.T) {
		for _, tc := range []struct {
			url, want string
			code      int
		}{
			{"http://" + a + "/", "hello from A", 200},
			{fmt.Sprintf("http://allowed.test:%d/", f.portA), "hello from A", 200},
			{fmt.Sprintf("http://x.suffix.test:%d/", f.portA), "hello from A", 200},
			{"http://" + c + "/", "hello from C", 200},
			{"http://" + b + "/", "oma-sandbox egress: refused " + b + ": not in the allowlist", 403},
			{"http://example.invalid/", "oma-sandbox egress: refused example.invalid:80: not in the allowlist", 403},
			{fmt.Sprintf("http://allowed.test:%d/", f.portB), "not in the allowlist", 403},
			{fmt.Sprintf("http://rebind.test:%d/", f.portB), "resolves to 127.0.0.1, a non-public address", 403},
		} {
			code, body := f.viaHTTP(t, tc.url)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("GET %s = %d %q, want %d %q", tc.url, code, body, tc.code, tc.want)
			}
		}
	})
	t.Run("secrets", func(t *testing.T) {
		for _, tc := range []struct {
			url, want string
			code      int
		}{
			{"http://" + a + "/", `auth="Bearer s3cret"`, 200},
			{fmt.Sprintf("http://x.suffix.test:%d/", f.portA), `auth="Bearer s3cret"`, 200},
			{fmt.Sprintf("http://allowed.test:%d/", f.portA), "carries secret TOKEN, which may go to 127.0.0.1, *.suffix.test only", 403},
			{"http://" + c + "/", "refused " + c + ": the request carries secret TOKEN", 403},
		} {
			code, body := f.viaHTTP(t, tc.url, "Authorization", "Bearer oma-secret-TOKEN-ph")
			if code != tc.code || !strings.Contains(body, tc.want) || code != 200 && strings.Contains(body, "s3cret") {
				t.Errorf("GET %s with the placeholder = %d %q, want %d %q", tc.url, code, body, tc.code, tc.want)
			}
		}
		if code, body := f.viaHTTP(t, "http://"+c+"/?k=oma-secret-TOKEN-ph"); code != 403 || !strings.Contains(body, "carries secret TOKEN") {
			t.Errorf("placeholder in the URL to another host = %d %q, want 403", code, body)
		}
	})
	t.Run("connect", func(t *testing.T) {
		for _, tc := range []struct{ dest, status, body string }{
			{a, "200 Connection Established", "hello from A"},
			{c, "200 Connection Established", "hello from C"},
			{fmt.Sprintf("allowed.test:%d", f.portA), "200 Connection Established", "hello from A"},
			{b, "403 Forbidden", "refused " + b},
			{"example.invalid:443", "403 Forbidden", "refused example.invalid:443: not in the allowlist"},
			{fmt.Sprintf("rebind.test:%d", f.portB), "403 Forbidden", "non-public address"},
			{fmt.Sprintf("[::1]:%d", f.portA), "403 Forbidden", "not in the allowlist"},
		} {
			status, body := f.viaConnect(t, tc.dest)
			if status != tc.status || !strings.Contains(body, tc.body) {
				t.Errorf("CONNECT %s = %q %q, want %q %q", tc.dest, status, body, tc.status, tc.body)
			}
		}
	})
	t.Run("socks5", func(t *testing.T) {
		for _, tc := range []struct {
			host string
			port uint16
			code byte
			body string
		}{
			{"127.0.0.1", f.portA, 0, "hello from A"},
			{"127.0.0.2", f.portC, 0, "hello from C"},
			{"allowed.test", f.portA, 0, "hello from A"},
			{"y.suffix.test", f.portA, 0, "hello from A"},
			{"127.0.0.1", f.portB, socksNotAllowed, ""},
			{"example.invalid", 443, socksNotAllowed, ""},
			{"rebind.test", f.portB, socksNotAllowed, ""},
			{"::1", f.portA, socksNotAllowed, ""},
			{"127.0.0.1", 0, socksNotAllowed, ""},
		} {
			code, body := f.viaSOCKS(t, tc.host, tc.port)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("SOCKS %s:%d = %d %q, want %d %q", tc.host, tc.port, code, body, tc.code, tc.body)
			}
		}
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.resolved {
		if h == "example.invalid" {
			t.Errorf("a name outside the allowlist was resolved: %v", f.resolved)
		}
	}
	// Each refusal reaches Refused, classed.
	refused := strings.Join(f.refused, "\n")
	for _, want := range []string{
		"not_allowed example.invalid:443: not in the allowlist",
		"not_allowed " + b + ": not in the allowlist",
		fmt.Sprintf("private_address rebind.test:%d: it resolves to 127.0.0.1", f.portB),
		"secret_misuse " + c + ": the request carries secret TOKEN",
		"invalid_destination 127.0.0.1:0: port 0",
	} {
		if !strings.Contains(refused, want) {
			t.Errorf("refusals reported: %q, want one with %q", f.refused, want)
		}
	}
}

// TestProxyBoundsTheRequestHead: a request head past maxRequestBytes is
// answered 400 rather than buffered.
func TestProxyBoundsTheRequestHead(t *testing.T) {
	f := newProxy(t)
	c, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		fmt.Fprintf(c, "GET http://example.invalid/ HTTP/1.1\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 2*maxRequestBytes))
	}()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != http.StatusBadRequest {
		t.Fatalf("oversized head: %v, %v; want 400", res, err)
	}
	res.Body.Close()
}

func TestIsPublic(t *testing.T) {
	for s, want := range map[string]bool{
		"8.8.8.8": true, "2001:4860::8888": true,
		"127.0.0.1": false, "10.1.2.3": false, "192.168.1.1": false, "172.16.0.1": false, "169.254.169.254": false,
		"100.64.0.1": false, "0.0.0.0": false, "::1": false, "fd00::1": false, "fe80::1": false, "::": false,
		"64:ff9b::a00:1": false, "64:ff9b:1::a00:1": false, "2002:a00:1::": false, "224.0.0.1": false,
	} {
		if got := isPublic(netip.MustParseAddr(s)); got != want {
			t.Errorf("isPublic(%s) = %v", s, got)
		}
	}
}

// TestProxyCloseRacesAccept: Close while connections keep arriving waits
// for every handler Serve started; none is counted once Close's Wait may
// have begun (a WaitGroup misuse: the race detector reports it, and it
// can panic the host process or let a handler outlive Close). The race
// is one of timing, hence the many rounds.
func TestProxyCloseRacesAccept(t *testing.T) {
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		p := &Proxy{}
		served := make(chan error, 1)
		go func() { served <- p.Serve(l) }()
		stop := make(chan struct{})
		var clients sync.WaitGroup
		for range 4 {
			clients.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					c, err := net.Dial("tcp", l.Addr().String())
					if err != nil {
						return
					}
					_, _ = c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
					c.Close()
				}
			})
		}
		time.Sleep(time.Millisecond)
		p.Close()
		l.Close()
		close(stop)
		clients.Wait()
		require.NoError(t, <-served)
	}
}

// TestProxyPlainHTTPToIPv6: an absolute URL naming a bracketed IPv6
// address without a port goes to that address on port 80, checked as an
// address.
func TestProxyPlainHTTPToIPv6(t *testing.T) {
	target, err := ParseTarget("[2001:db8::1]:80")
	require.NoError(t, err)
	dialled := make(chan string, 1)
	p := &Proxy{
		Policy: Policy{Allow: []Target{target}},
		Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
			dialled <- addr
			c, up := net.Pipe()
			go func() {
				defer up.Close()
				if _, err := http.ReadRequest(bufio.NewReader(up)); err == nil {
					_, _ = io.WriteString(up, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nv6")
				}
			}()
			return c, nil
		},
	}
	c, up := net.Pipe()
	defer c.Close()
	go func() {
		defer up.Close()
		p.handle(up)
	}()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = io.WriteString(c, "GET http://[2001:db8::1]/ HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n") }()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	assert.Equal(t, http.StatusOK, res.StatusCode, "body %q", body)
	assert.Equal(t, "v6", string(body))
	select {
	case addr := <-dialled:
		assert.Equal(t, "[2001:db8::1]:80", addr)
	default:
		t.Error("nothing was dialled")
	}
}

// TestProxySecretKeepAlive: a request pipelined after one to a secret's
// host, on the same client connection, never takes the secret's value to
// another host: the proxy serves one request per connection.
func TestProxySecretKeepAlive(t *testing.T) {
	f := newProxy(t)
	c, err := net.DialTimeout("tcp", f.addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	a := fmt.Sprintf("127.0.0.1:%d", f.portA)
	other := fmt.Sprintf("127.0.0.2:%d", f.portC)
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer oma-secret-TOKEN-ph\r\nConnection: keep-alive\r\n\r\n"+
		"GET http://%s/ HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer oma-secret-TOKEN-ph\r\n\r\n", a, a, other, other)
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Contains(t, string(got), `hello from A auth="Bearer s3cret"`)
	assert.NotContains(t, string(got), "hello from C")
}

// TestProxyCloseEndsADialInProgress: Close does not wait out the dial of a
// destination that never answers (its deadline is 30 s), nor its lookup.
func TestProxyCloseEndsADialInProgress(t *testing.T) {
	var pol Policy
	for _, s := range []string{"192.0.2.1:80", "*.lookup.test"} {
		target, err := ParseTarget(s)
		require.NoError(t, err)
		pol.Allow = append(pol.Allow, target)
	}
	waiting := make(chan string, 2)
	p := &Proxy{
		Policy: pol,
		Resolve: func(ctx context.Context, _ string) ([]netip.Addr, error) {
			waiting <- "lookup"
			<-ctx.Done()
			return nil, ctx.Err()
		},
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			waiting <- "dial"
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go func() { _ = p.Serve(l) }()
	for _, req := range []string{"CONNECT 192.0.2.1:80 HTTP/1.1\r\n\r\n", "CONNECT a.lookup.test:443 HTTP/1.1\r\n\r\n"} {
		c, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		_, err = io.WriteString(c, req)
		require.NoError(t, err)
	}
	for range 2 {
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("the proxy never began to dial")
		}
	}
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waiting after 5s for a dial and a lookup")
	}
}

// failingListener's Accept fails with err n times before it accepts.
type failingListener struct {
	net.Listener
	err error
	n   atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", l.err)}
	}
	return l.Listener.Accept()
}

// TestProxyServesOnAfterRunningOutOfDescriptors: an Accept that fails for
// want of descriptors (the host process's, shared by every session it
// serves, which a guest's connections can use up) does not end Serve: the
// proxy serves again once some are free. Another error still ends it.
func TestProxyServesOnAfterRunningOutOfDescriptors(t *testing.T) {
	port := testutil.LoopbackServer(t, "127.0.0.1:0", "A")
	target, err := ParseTarget(fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &failingListener{Listener: inner, err: syscall.EMFILE}
	l.n.Store(5)
	p := &Proxy{Policy: Policy{Allow: []Target{target}}}
	served := make(chan error, 1)
	go func() { served <- p.Serve(l) }()
	c, err := net.DialTimeout("tcp", inner.Addr().String(), 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET http://127.0.0.1:%d/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", port)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "the proxy stopped serving")
	body, _ := io.ReadAll(res.Body)
	assert.Equal(t, `hello from A auth=""`, string(body))
	p.Close()
	inner.Close()
	require.NoError(t, <-served)

	bad := &failingListener{Listener: inner, err: syscall.EINVAL}
	bad.n.Store(1)
	assert.ErrorIs(t, (&Proxy{}).Serve(bad), syscall.EINVAL)
}
