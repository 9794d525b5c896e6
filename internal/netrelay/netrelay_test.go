package netrelay

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ToUnix relays each connection both ways, passing on the client's
// half-close, and holds at most MaxRelays at once: one more is closed
// unanswered, and a slot freed serves the next.
func TestToUnix(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "up.sock")
	up, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the client's half-close
				fmt.Fprintf(c, "up:%s", b)
			}()
		}
	}()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go ToUnix(l, sock)

	roundTrip := func() (string, error) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return "", err
		}
		defer c.Close()
		if _, err := c.Write([]byte("hello")); err != nil {
			return "", err
		}
		CloseWrite(c)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		return string(b), err
	}
	got, err := roundTrip()
	require.NoError(t, err)
	assert.Equal(t, "up:hello", got)

	// MaxRelays connections held open (none half-closes), then one more.
	held := make([]net.Conn, MaxRelays)
	for i := range held {
		held[i], err = net.Dial("tcp", l.Addr().String())
		require.NoError(t, err)
		defer held[i].Close()
	}
	require.Eventually(t, func() bool {
		got, err := roundTrip()
		return err == nil && got == ""
	}, 5*time.Second, 10*time.Millisecond, "a connection past MaxRelays was relayed")
	held[0].Close()
	require.Eventually(t, func() bool {
		got, err := roundTrip()
		return err == nil && got == "up:hello"
	}, 5*time.Second, 10*time.Millisecond, "a freed slot serves no new connection")
}
