// Package netrelay copies connections both ways: the sandbox's relay to
// the host's egress proxy, and the proxy to what it dials.
package netrelay

import (
	"io"
	"net"
)

// Pipe copies from (c's reader, or one that holds bytes already read from
// it) to up and up to c until both directions end, passing each end on as
// a half-close.
func Pipe(c net.Conn, from io.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, from)
		CloseWrite(up)
		close(done)
	}()
	_, _ = io.Copy(c, up)
	CloseWrite(c)
	<-done
}

// CloseWrite ends c's writing half, or c when it has none.
func CloseWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// MaxRelays bounds the connections ToUnix relays at once: past it a new
// one is closed at once, so that a sandbox's command that opens endless
// connections cannot take every descriptor of the process relaying them
// (the proxy behind it holds at most 512 too).
const MaxRelays = 512

// ToUnix accepts connections on l until it is closed and relays each to
// a new connection to the unix socket at path, at most MaxRelays at once;
// one that cannot connect is closed.
func ToUnix(l net.Listener, path string) {
	slots := make(chan struct{}, MaxRelays)
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		go func() {
			defer func() { <-slots }()
			defer c.Close()
			up, err := net.Dial("unix", path)
			if err != nil {
				return
			}
			defer up.Close()
			Pipe(c, c, up)
		}()
	}
}
