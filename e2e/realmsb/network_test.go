//go:build linux

package realmsb_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// TestRealMSBNetwork: an allowlist naming the host's loopback service
// (microvm.HostAlias with its port) lets the guest reach that service and
// no other port of the host; a secret's value never enters the guest,
// which sees msb's placeholder in its place. fakemsb does not model msb's
// host alias, so this scenario runs on the real msb only; the argv it
// maps to is TestCreateMapsTheNetworkPolicy's.
func TestRealMSBNetwork(t *testing.T) {
	tg := realTarget(t)
	allowed, denied := serve(t, "allowed"), serve(t, "denied")
	const secret = "oma-host-secret-7f3a9c"
	t.Setenv("OMA_TEST_SECRET", secret)
	p := egress.Policy{Mode: egress.Allowlist}
	target, err := egress.ParseTarget(fmt.Sprintf("%s:%d", microvm.HostAlias, allowed))
	require.NoError(t, err)
	p.Allow = []egress.Target{target}
	sec, err := egress.ParseSecret("OMA_TEST_SECRET@" + microvm.HostAlias)
	require.NoError(t, err)
	p.Secrets = []egress.Secret{sec}
	o := tg.options("network")
	o.Network = p
	s, err := microvm.Create(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })

	// bash's /dev/tcp: the image has no HTTP client.
	get := `get() {
  if ! exec 3<>"/dev/tcp/$2/$1"; then echo "no connection"; return; fi
  printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' "$2" >&3
  timeout 20 cat <&3 | tail -n 1; echo
}
`
	call := func(port int, host string) string {
		t.Helper()
		return toolCall(t, s, "bash", map[string]any{"command": fmt.Sprintf("%sget %d %s 2>&1", get, port, host), "timeout": 60})
	}
	if !assert.Equal(t, "served allowed\n", call(allowed, microvm.HostAlias), "the allowed port of the host's loopback, by name") {
		t.Logf("the guest's name service: %q", toolCall(t, s, "bash", map[string]any{"command": "cat /etc/hosts /etc/nsswitch.conf; getent ahosts " + microvm.HostAlias + "; ip -4 route 2>&1 || cat /proc/net/route; true"}))
	}
	assert.NotContains(t, call(denied, microvm.HostAlias), "served", "another port of the host")

	env := toolCall(t, s, "bash", map[string]any{"command": `echo "$OMA_TEST_SECRET"; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c oma-host-secret || true`})
	t.Logf("the guest's OMA_TEST_SECRET and the count of environments holding the value: %q", env)
	assert.NotContains(t, env, secret, "the secret's value is in the guest")
	assert.True(t, strings.HasPrefix(env, "$MSB_OMA_TEST_SECRET\n"), "the guest sees the placeholder: %q", env)
	requireOnChannel(t, s)
}

// serve answers "served NAME" on a loopback port of this host, the outer
// guest's when the suite runs in one, until the test ends.
func serve(t *testing.T, name string) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "served %s", name)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}
