//go:build linux

package guestagent

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// An agent serving with --egress-relay listens on the TCP address before
// it serves and relays each connection to the unix socket (a session's
// egress proxy); a bad spec is refused before it serves.
func TestServeRelaysEgress(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	testutil.UnixEcho(t, sock)
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))

	stdinR, stdinW := io.Pipe()
	var stderr bytes.Buffer
	served := make(chan int, 1)
	go func() {
		served <- Main([]string{"serve", "--default-user", "", "--egress-relay=" + addr + "=" + sock}, stdinR, io.Discard, &stderr)
	}()
	var c net.Conn
	var err error
	require.Eventually(t, func() bool { c, err = net.Dial("tcp", addr); return err == nil }, 5e9, 1e7)
	_, err = c.Write([]byte("hello"))
	require.NoError(t, err)
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	c.Close()
	assert.Equal(t, "echo:hello", string(got))
	stdinW.Close()
	assert.Equal(t, 0, <-served, stderr.String())
	_, err = net.Dial("tcp", addr)
	assert.Error(t, err, "the relay outlived the agent's serving")

	for _, spec := range []string{"127.0.0.1:1", "=" + sock, "127.0.0.1:1=relative.sock", "999.1.1.1:1=" + sock} {
		stderr.Reset()
		assert.Equal(t, 2, Main([]string{"serve", "--egress-relay=" + spec}, bytes.NewReader(nil), io.Discard, &stderr), spec)
		assert.Contains(t, stderr.String(), "--egress-relay="+spec)
	}
}
