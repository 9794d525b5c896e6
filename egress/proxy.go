package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oma-sandbox/oma-sandbox/internal/netrelay"
)

// Proxy is a host-side egress filter: an HTTP proxy (CONNECT tunnels and
// plain absolute-form requests) and a SOCKS5 proxy (CONNECT, no
// authentication) on one listener, told apart by the first byte. Each
// destination is checked against Policy before anything is dialled: a DNS
// name by name before it is resolved, then every address it resolves to
// must be public or itself allowed by an IP or CIDR target (so an allowed
// name cannot be rebound to a private or loopback address); an IP by
// address. Only the checked addresses are dialled.
type Proxy struct {
	Policy Policy
	// Resolve looks a name up; nil means net.DefaultResolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to a checked address; nil means a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Refused, when set, is told of each refused destination and secret
	// violation (audit).
	Refused func(*RefusedError)
	// Secrets are substituted for their placeholders in the headers of
	// plain HTTP requests to their hosts; a placeholder in a request to
	// any other host refuses the request. CONNECT tunnels are not opened,
	// so a placeholder sent through one stays a placeholder.
	Secrets []SecretValue

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	ended  context.Context // ends at Close, and the lookups and dials under it
	end    context.CancelFunc
}

// dialTimeout bounds resolving and connecting one destination.
const dialTimeout = 30 * time.Second

// Serve accepts connections on l until l is closed or Close is called.
func (p *Proxy) Serve(l net.Listener) error {
	var pause time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if !acceptCanRecover(err) {
				return err
			}
			// Out of descriptors (the process's, which other sessions
			// share) or a connection aborted before it was taken: wait
			// and go on, as net/http does, rather than stop serving.
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			time.Sleep(pause)
			continue
		}
		pause = 0
		if !p.track(c, true) {
			c.Close()
			if p.isClosed() {
				return nil
			}
			continue // at maxConns: refuse this one, serve the rest
		}
		go func() {
			defer p.track(c, false)
			p.handle(c)
		}()
	}
}

// acceptCanRecover tells an Accept error that passes, given time.
func acceptCanRecover(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Close ends every connection being served (both sides) and waits for
// their handlers.
// The caller closes the listener.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.end != nil {
		p.end()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// endedContext is a context that ends when Close is called.
func (p *Proxy) endedContext() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended == nil {
		p.ended, p.end = context.WithCancel(context.Background())
		if p.closed {
			p.end()
		}
	}
	return p.ended
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// track adds c to the connections Close ends, or removes and closes it.
// wg counts the tracked connections for Close to wait on; it is added to
// under mu with closed unset, so no Add can race Close's Wait.
func (p *Proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !add {
		delete(p.conns, c)
		c.Close()
		p.wg.Done()
		return true
	}
	if p.closed || len(p.conns) >= maxConns {
		return false
	}
	if p.conns == nil {
		p.conns = map[net.Conn]struct{}{}
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	return true
}

// maxRequestBytes bounds what a client may send before its destination is
// known (an HTTP request's head, a SOCKS greeting), so a client cannot make
// the proxy buffer without bound; maxConns bounds the descriptors it holds.
const (
	maxRequestBytes = 64 << 10
	maxConns        = 512
)

func (p *Proxy) handle(c net.Conn) {
	head := &io.LimitedReader{R: c, N: maxRequestBytes}
	br := bufio.NewReader(head)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == 5 {
		p.socks(c, br, head)
		return
	}
	p.http(c, br, head)
}

// RefusedError is a destination the policy does not allow.
type RefusedError struct {
	Dest   string      `json:"dest"`
	Kind   RefusalKind `json:"kind"`
	Reason string      `json:"reason"`
}

// RefusalKind classes a refusal, for counting; Reason says it in words.
type RefusalKind string

const (
	// NotAllowed: the allowlist does not name the destination.
	NotAllowed RefusalKind = "not_allowed"
	// InvalidDest: no valid host name, or port 0.
	InvalidDest RefusalKind = "invalid_destination"
	// PrivateAddress: an allowed name resolved to a non-public address
	// the allowlist does not name.
	PrivateAddress RefusalKind = "private_address"
	// SecretMisuse: a request carried a secret's placeholder to a host
	// the secret may not go to.
	SecretMisuse RefusalKind = "secret_misuse"
)

func (e *RefusedError) Error() string {
	return "oma-sandbox egress: refused " + e.Dest + ": " + e.Reason
}

// connect checks host:port and dials it.
func (p *Proxy) connect(ctx context.Context, host string, port uint16) (net.Conn, error) {
	dest := net.JoinHostPort(host, strconv.Itoa(int(port)))
	refuse := func(kind RefusalKind, reason string) error {
		return p.refuse(&RefusedError{Dest: dest, Kind: kind, Reason: reason})
	}
	if port == 0 {
		return nil, refuse(InvalidDest, "port 0")
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	// Close must not wait out a destination that never answers.
	defer context.AfterFunc(p.endedContext(), cancel)()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" || !p.Policy.AllowsAddr(a, port) {
			return nil, refuse(NotAllowed, "not in the allowlist")
		}
		addrs = []netip.Addr{a.Unmap()}
	} else {
		if checkName(canonicalName(host)) != nil {
			return nil, refuse(InvalidDest, "not a valid host name")
		}
		if !p.Policy.AllowsName(host, port) {
			return nil, refuse(NotAllowed, "not in the allowlist")
		}
		resolved, err := p.resolve(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		for _, a := range resolved {
			a = a.Unmap()
			if !isPublic(a) && !p.Policy.AllowsAddr(a, port) {
				return nil, refuse(PrivateAddress, "it resolves to "+a.String()+", a non-public address the allowlist does not name")
			}
			addrs = append(addrs, a)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	var errs []error
	for _, a := range addrs {
		c, err := p.dial(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func (p *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if p.Resolve != nil {
		return p.Resolve(ctx, host)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

func (p *Proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if p.Dial != nil {
		return p.Dial(ctx, network, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// isPublic: not loopback, private, link-local, unspecified, multicast,
// carrier-grade NAT or otherwise special-purpose.
func isPublic(a netip.Addr) bool {
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range specialPrefixes {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64 can reach any IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64 (RFC 8215) likewise
	netip.MustParsePrefix("2002::/16"),      // 6to4 likewise
}

// http serves one request: CONNECT opens a tunnel, an absolute-form
// request is forwarded with Connection: close.
func (p *Proxy) http(c net.Conn, br *bufio.Reader, head *io.LimitedReader) {
	_ = c.SetReadDeadline(time.Now().Add(dialTimeout))
	req, err := http.ReadRequest(br)
	if err != nil {
		writeStatus(c, http.StatusBadRequest, "oma-sandbox egress: not an HTTP proxy request\n")
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	head.N = math.MaxInt64 // the rest is the tunnel's or the body's
	host, port, err := requestTarget(req)
	if err != nil {
		writeStatus(c, http.StatusBadRequest, "oma-sandbox egress: "+err.Error()+"\n")
		return
	}
	up, err := p.connect(req.Context(), host, port)
	if err != nil {
		status := http.StatusBadGateway
		var re *RefusedError
		if errors.As(err, &re) {
			status = http.StatusForbidden
		}
		writeStatus(c, status, err.Error()+"\n")
		return
	}
	if !p.track(up, true) {
		up.Close()
		return
	}
	defer p.track(up, false)
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
			return
		}
		netrelay.Pipe(c, br, up)
		return
	}
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive"} {
		req.Header.Del(h)
	}
	if err := p.substitute(req, host, port); err != nil {
		writeStatus(c, http.StatusForbidden, err.Error()+"\n")
		return
	}
	req.Close = true
	if err := req.Write(up); err != nil {
		return
	}
	_, _ = io.Copy(c, up)
}

// SecretValue is a secret with the placeholder the sandbox sees and the
// value only the proxy holds.
type SecretValue struct {
	Secret
	Placeholder string
	Value       string
}

// substitute puts each secret's value in place of its placeholder in the
// request's headers when the request goes to one of its hosts, and
// refuses a request that carries a placeholder anywhere else.
func (p *Proxy) substitute(req *http.Request, host string, port uint16) error {
	for _, s := range p.Secrets {
		if s.Placeholder == "" {
			continue
		}
		allowed := s.AllowsHost(host)
		inURL := strings.Contains(req.URL.String(), s.Placeholder)
		for k, vs := range req.Header {
			for i, v := range vs {
				if !strings.Contains(v, s.Placeholder) {
					continue
				}
				if !allowed {
					return p.violation(s, host, port)
				}
				req.Header[k][i] = strings.ReplaceAll(v, s.Placeholder, s.Value)
			}
		}
		if inURL && !allowed {
			return p.violation(s, host, port)
		}
	}
	return nil
}

func (p *Proxy) violation(s SecretValue, host string, port uint16) error {
	dest := net.JoinHostPort(host, strconv.Itoa(int(port)))
	return p.refuse(&RefusedError{Dest: dest, Kind: SecretMisuse,
		Reason: "the request carries secret " + s.Env + ", which may go to " + strings.Join(s.Hosts, ", ") + " only"})
}

// refuse tells Refused of e and returns it.
func (p *Proxy) refuse(e *RefusedError) error {
	if p.Refused != nil {
		p.Refused(e)
	}
	return e
}

// requestTarget is the host and port a proxy request names.
func requestTarget(req *http.Request) (string, uint16, error) {
	if req.Method == http.MethodConnect {
		return splitHostPort(req.RequestURI)
	}
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return "", 0, errors.New("want CONNECT HOST:PORT or an absolute http:// URL")
	}
	if req.URL.Port() == "" {
		// Hostname, not Host: an IPv6 address loses its brackets.
		return req.URL.Hostname(), 80, nil
	}
	return splitHostPort(req.URL.Host)
}

func splitHostPort(hp string) (string, uint16, error) {
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("want HOST:PORT, got %q", hp)
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("bad port in %q", hp)
	}
	return host, uint16(n), nil
}

func writeStatus(c net.Conn, code int, body string) {
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Oma-Egress: refused\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// pipe copies both ways until both directions end; from is what the
// client sends (c itself, or a reader holding what it sent past the
// request).
// SOCKS5 reply codes (RFC 1928).
const (
	socksOK          = 0
	socksFailure     = 1
	socksNotAllowed  = 2
	socksUnreachable = 4
	socksBadCommand  = 7
	socksBadAddress  = 8
)

func (p *Proxy) socks(c net.Conn, br *bufio.Reader, head *io.LimitedReader) {
	_ = c.SetReadDeadline(time.Now().Add(dialTimeout))
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == 0
	}
	if !noAuth {
		_, _ = c.Write([]byte{5, 0xff})
		return
	}
	if _, err := c.Write([]byte{5, 0}); err != nil {
		return
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != 5 {
		return
	}
	var host string
	switch req[3] {
	case 1, 4:
		b := make([]byte, 4)
		if req[3] == 4 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		a, _ := netip.AddrFromSlice(b)
		host = a.String()
	case 3:
		n, err := br.ReadByte()
		if err != nil {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = string(b)
	default:
		socksReply(c, socksBadAddress)
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	head.N = math.MaxInt64 // the rest is the tunnel's or the body's
	if req[1] != 1 {
		socksReply(c, socksBadCommand)
		return
	}
	up, err := p.connect(context.Background(), host, binary.BigEndian.Uint16(pb[:]))
	if err != nil {
		var re *RefusedError
		switch {
		case errors.As(err, &re):
			socksReply(c, socksNotAllowed)
		case errors.Is(err, context.DeadlineExceeded):
			socksReply(c, socksUnreachable)
		default:
			socksReply(c, socksFailure)
		}
		return
	}
	if !p.track(up, true) {
		up.Close()
		return
	}
	defer p.track(up, false)
	socksReply(c, socksOK)
	netrelay.Pipe(c, br, up)
}

func socksReply(c net.Conn, code byte) {
	_, _ = c.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0})
}
