//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// portMapping is one create -p, kept in inspect's shape.
type portMapping struct {
	GuestPort uint16 `json:"guest_port"`
	HostBind  string `json:"host_bind"`
	HostPort  uint16 `json:"host_port"`
	Protocol  string `json:"protocol"`
}

// parsePort reads -p in msb 0.6.18's grammar and with its messages:
// HOST:GUEST, BIND_ADDR:HOST:GUEST or [IPV6]:HOST:GUEST, each with an
// optional /udp or /tcp; the bind address defaults to 127.0.0.1.
func parsePort(spec string) (portMapping, error) {
	body, proto := spec, "tcp"
	if p, ok := strings.CutSuffix(spec, "/udp"); ok {
		body, proto = p, "udp"
	} else if p, ok := strings.CutSuffix(spec, "/tcp"); ok {
		body = p
	}
	var bind, host, guest string
	if rest, ok := strings.CutPrefix(body, "["); ok {
		b, after, ok := strings.Cut(rest, "]:")
		if !ok {
			return portMapping{}, failf("IPv6 port bind must be in format [ADDR]:HOST:GUEST[/udp]")
		}
		if host, guest, ok = strings.Cut(after, ":"); !ok {
			return portMapping{}, failf("port must be in format [ADDR]:HOST:GUEST[/udp]")
		}
		bind = b
	} else {
		switch parts := strings.Split(body, ":"); len(parts) {
		case 2:
			bind, host, guest = "127.0.0.1", parts[0], parts[1]
		case 3:
			bind, host, guest = parts[0], parts[1], parts[2]
		default:
			return portMapping{}, failf("port must be in format HOST:GUEST[/udp] or BIND_ADDR:HOST:GUEST[/udp]")
		}
	}
	addr, err := netip.ParseAddr(bind)
	if err != nil || addr.Zone() != "" {
		return portMapping{}, failf("invalid bind address: %s", bind)
	}
	h, err := strconv.ParseUint(strings.TrimSpace(host), 10, 16)
	if err != nil {
		return portMapping{}, failf("invalid host port: %s", host)
	}
	g, err := strconv.ParseUint(strings.TrimSpace(guest), 10, 16)
	if err != nil {
		return portMapping{}, failf("invalid guest port: %s", guest)
	}
	return portMapping{GuestPort: uint16(g), HostBind: addr.String(), HostPort: uint16(h), Protocol: proto}, nil
}

// ingressAllowed reports whether msb's ingress policy admits a forwarded
// connection to guest port m: no policy (the network is on) admits it,
// --no-net without rules refuses it, and otherwise an allow rule of
// direction ingress or any for the port and protocol, else the default.
func (sb *sandbox) ingressAllowed(m portMapping) bool {
	p := sb.NetPolicy
	if p == nil {
		return sb.Network
	}
	for _, r := range p.Rules {
		if r.Direction != "ingress" && r.Direction != "any" {
			continue
		}
		if len(r.Protocols) > 0 && r.Protocols[0] != m.Protocol {
			continue
		}
		if len(r.Ports) > 0 && (int(m.GuestPort) < r.Ports[0]["start"] || int(m.GuestPort) > r.Ports[0]["end"]) {
			continue
		}
		return r.Action == "allow"
	}
	return p.DefaultIngress == "allow"
}

// The forwarder is a process of this binary, started with forwarderArg
// once the holder is up: it listens on each TCP mapping's host address and
// relays every connection the ingress policy admits to 127.0.0.1:GUEST in
// the holder's network namespace, which it enters per connection on a
// locked thread. It reports on fd 3 "ready" or the first listen error,
// and exits when the holder's init does. UDP mappings are bound (so a
// conflict fails the start as it would in msb) but carry no datagrams.
const forwarderArg = "__fakemsb-forward"

// startForwarder runs the forwarder for sb's mappings and records it in h.
func (a *app) startForwarder(sb *sandbox, h *holder, log *os.File) error {
	args := []string{forwarderArg, strconv.Itoa(h.InitPID), strconv.FormatUint(h.InitStart, 10)}
	for _, m := range sb.Ports {
		verdict := "deny"
		if sb.ingressAllowed(m) {
			verdict = "allow"
		}
		args = append(args, fmt.Sprintf("%s,%s,%d,%d,%s", m.Protocol, m.HostBind, m.HostPort, m.GuestPort, verdict))
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	cmd := exec.Command(self, args...)
	cmd.Env = []string{holderEnv + "=" + a.holderMarker(sb.Name)}
	cmd.Stderr = log
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	line, _ := bufio.NewReader(readyR).ReadString('\n')
	if line != "ready\n" {
		_ = cmd.Process.Kill()
		if line = strings.TrimSpace(line); line == "" {
			line = "port forwarder exited"
		}
		return errors.New(line)
	}
	h.ForwarderPID = cmd.Process.Pid
	h.ForwarderStart, _ = procStart(cmd.Process.Pid)
	return nil
}

// stopForwarder kills h's forwarder and waits until it is gone, so that
// its host ports are free when this returns.
func (h *holder) stopForwarder() {
	if h == nil || h.ForwarderPID == 0 {
		return
	}
	live := func() bool {
		st, ok := procStart(h.ForwarderPID)
		return ok && st == h.ForwarderStart
	}
	if live() {
		_ = syscall.Kill(h.ForwarderPID, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(10 * time.Second); live() && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
}

// runForwarder is the forwarder process; it never returns.
func runForwarder(args []string) {
	ready := os.NewFile(3, "ready")
	fail := func(format string, a ...any) {
		fmt.Fprintf(ready, format+"\n", a...)
		os.Exit(1)
	}
	if len(args) < 3 {
		fail("bad forwarder arguments %q", args)
	}
	pid, err1 := strconv.Atoi(args[0])
	start, err2 := strconv.ParseUint(args[1], 10, 64)
	if err1 != nil || err2 != nil {
		fail("bad forwarder arguments %q", args)
	}
	// Open the namespace first, then check that pid is still the holder's
	// init: a recycled pid must not lend us another process's network.
	ns, err := os.Open("/proc/" + args[0] + "/ns/net")
	if st, ok := procStart(pid); err != nil || !ok || st != start {
		fail("network: the sandbox is gone")
	}
	for _, spec := range args[2:] {
		f := strings.Split(spec, ",")
		if len(f) != 5 {
			fail("bad forward %q", spec)
		}
		addr := net.JoinHostPort(f[1], f[2])
		if f[0] == "udp" {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				fail("network: bind %s/udp: %v", addr, cause(err))
			}
			go serveUDPForward(pc, ns, net.JoinHostPort("127.0.0.1", f[3]), f[4] == "allow")
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fail("network: bind %s: %v", addr, cause(err))
		}
		go serveForward(l, ns, net.JoinHostPort("127.0.0.1", f[3]), f[4] == "allow")
	}
	fmt.Fprintln(ready, "ready")
	ready.Close()
	for {
		if st, ok := procStart(pid); !ok || st != start {
			os.Exit(0)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cause is the innermost error of err ("address already in use").
func cause(err error) error {
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return err
		}
		err = inner
	}
}

func serveForward(l net.Listener, ns *os.File, guest string, allowed bool) {
	for {
		c, err := l.Accept()
		if err != nil {
			// Out of descriptors, say: wait instead of spinning.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !allowed {
			// As msb: a connection the ingress policy refuses is reset.
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		go relay(c, ns, guest)
	}
}

// udpIdle closes a UDP flow (one host client) whose guest side has sent
// nothing for this long; the client's next datagram opens a new one.
const udpIdle = time.Minute

// serveUDPForward relays datagrams: each host client gets its own socket
// in ns, connected to guest, and the guest's replies go back to that
// client. A port the ingress policy refuses drops what it receives.
func serveUDPForward(pc net.PacketConn, ns *os.File, guest string, allowed bool) {
	var mu sync.Mutex
	flows := map[string]net.Conn{}
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !allowed {
			continue
		}
		key := from.String()
		mu.Lock()
		g, ok := flows[key]
		mu.Unlock()
		if !ok {
			if g, err = dialIn(ns, "udp", guest); err != nil {
				continue
			}
			mu.Lock()
			flows[key] = g
			mu.Unlock()
			go func() {
				defer func() {
					mu.Lock()
					delete(flows, key)
					mu.Unlock()
					g.Close()
				}()
				reply := make([]byte, 64<<10)
				for {
					_ = g.SetReadDeadline(time.Now().Add(udpIdle))
					m, err := g.Read(reply)
					if err != nil {
						return
					}
					_, _ = pc.WriteTo(reply[:m], from)
				}
			}()
		}
		_, _ = g.Write(buf[:n])
	}
}

// relay connects to guest inside ns and copies both ways until either
// side is done.
func relay(c net.Conn, ns *os.File, guest string) {
	defer c.Close()
	g, err := dialIn(ns, "tcp", guest)
	if err != nil {
		return
	}
	defer g.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(g, c)
	go pipe(c, g)
	<-done
	<-done
}

// dialIn opens the connection from a thread that joined ns: a socket
// belongs to the namespace it was made in. The thread is never unlocked,
// so Go ends it with the goroutine instead of reusing it elsewhere.
func dialIn(ns *os.File, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, err}
			return
		}
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
