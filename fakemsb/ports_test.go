//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// inspectNetwork returns config.network of an inspect document.
func inspectNetwork(t *testing.T, doc string) map[string]json.RawMessage {
	t.Helper()
	var d struct {
		Config struct {
			Network map[string]json.RawMessage `json:"network"`
		} `json:"config"`
	}
	require.NoError(t, json.Unmarshal([]byte(doc), &d), doc)
	return d.Config.Network
}

// TestPortsShownAsRealMSB: the captured create with -p records its ports,
// and the ingress rule that opens them, exactly as real msb 0.6.18 shows
// them in inspect.
func TestPortsShownAsRealMSB(t *testing.T) {
	argv, err := os.ReadFile(filepath.Join(realDir, "create-ports.argv"))
	require.NoError(t, err)
	real, err := os.ReadFile(filepath.Join(realDir, "inspect-ports.stdout"))
	require.NoError(t, err)
	f := newFx(t)
	// Whether or not fakemsb can bind these ports here, the record keeps them.
	f.run(strings.Split(strings.TrimSpace(string(argv)), "\n")...)
	got := f.ok("inspect", "capports", "--format", "json")
	for _, field := range []string{"ports", "policy"} {
		assert.JSONEq(t, string(inspectNetwork(t, string(real))[field]), string(inspectNetwork(t, got.stdout)[field]), field)
	}
}

// TestPortForwardReachesGuest: a server the guest starts on its own
// loopback is reachable from the host through -p, only on 127.0.0.1, only
// for a guest port the ingress policy admits, and no longer once the
// sandbox stops.
func TestPortForwardReachesGuest(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 serves the guest's page")
	}
	f := newFx(t)
	open, closed := testutil.FreePort(t), testutil.FreePort(t)
	f.ok("create", "alpine", "--name", "web", "-q", "--no-net", "--net-rule", "allow:ingress@any:tcp:8000",
		"-p", fmt.Sprintf("%d:8000", open), "-p", fmt.Sprintf("%d:8001", closed))
	f.ok("exec", "web", "--", "sh", "-c", `cd /tmp && echo from-guest >index.html &&
		for p in 8000 8001; do (setsid python3 -m http.server $p --bind 127.0.0.1 >/dev/null 2>&1 &); done`)
	client := http.Client{Timeout: 3 * time.Second}
	get := func(port int) (string, error) {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", port))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	require.Eventually(t, func() bool { _, err := get(open); return err == nil }, 10*time.Second, 50*time.Millisecond)
	body, err := get(open)
	require.NoError(t, err)
	assert.Equal(t, "from-guest\n", body)
	_, err = get(closed)
	assert.Error(t, err, "a guest port without an ingress rule was reachable")
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("[::1]:%d", open), time.Second); err == nil {
		c.Close()
		t.Error("the forward listens beyond 127.0.0.1")
	}
	f.ok("stop", "web")
	_, err = get(open)
	assert.Error(t, err, "the forward outlived its sandbox")
}

// TestUDPPortForwardReachesGuest: a UDP service in the guest answers a host
// client through -p HOST:GUEST/udp, only on a port the ingress policy
// admits.
func TestUDPPortForwardReachesGuest(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 serves the guest's UDP echo")
	}
	f := newFx(t)
	open, closed := freeUDPPort(t), freeUDPPort(t)
	f.ok("create", "alpine", "--name", "dns", "-q", "--no-net", "--net-rule", "allow:ingress@any:udp:5300",
		"-p", fmt.Sprintf("%d:5300/udp", open), "-p", fmt.Sprintf("%d:5301/udp", closed))
	f.ok("exec", "dns", "--", "sh", "-c", `for p in 5300 5301; do (setsid python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", int(sys.argv[1])))
while True:
    d, a = s.recvfrom(65535)
    s.sendto(d.upper(), a)
' $p >/dev/null 2>&1 &); done`)
	ask := func(port int) (string, error) {
		c, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return "", err
		}
		defer c.Close()
		if _, err := c.Write([]byte("ping")); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		b := make([]byte, 64)
		n, err := c.Read(b)
		return string(b[:n]), err
	}
	require.Eventually(t, func() bool { _, err := ask(open); return err == nil }, 10*time.Second, 50*time.Millisecond)
	got, err := ask(open)
	require.NoError(t, err)
	assert.Equal(t, "PING", got)
	_, err = ask(closed)
	assert.Error(t, err, "a guest port without an ingress rule answered")
	f.ok("stop", "dns")
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// TestPortConflictFailsStart: a host port already in use fails the start
// as msb does (failed to start, the record kept stopped), and the port
// stays its owner's.
func TestPortConflictFailsStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	f := newFx(t)
	r := f.run("create", "alpine", "--name", "clash", "-q", "-p", fmt.Sprintf("%d:80", port))
	assert.Equal(t, 1, r.code)
	assert.Equal(t, fmt.Sprintf("error: failed to start \"clash\"\n  → network: bind 127.0.0.1:%d: address already in use\n", port), r.stderr)
	assert.Equal(t, statusStopped, f.state().Sandboxes["clash"].Status)
	assert.Empty(t, holderProcs(f.home+"|"), "a holder or forwarder outlived the failed start")
}
