//go:build linux

package local

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// TestAllowlistThroughTheHostProxy: a session with an allowlist reaches an
// allowed host server through the proxy variables (HTTP and SOCKS5), is
// refused a server on another port, another address and a name outside
// the list with a clear line, cannot connect around the proxy, and the
// refusals come back as notes on stderr.
func TestAllowlistThroughTheHostProxy(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	inBoth(t, allowlistThroughTheHostProxy)
}

// inBoth runs test in a session's resident sandbox (where the agent relays
// to the session's detached proxy) and in a sandbox per call (where a
// relay does, to this process's).
func inBoth(t *testing.T, test func(t *testing.T, perCall bool)) {
	for _, perCall := range []bool{false, true} {
		t.Run(map[bool]string{false: "resident", true: "per call"}[perCall], func(t *testing.T) { test(t, perCall) })
	}
}

// assertRanResident checks that the session's calls ran in its resident
// sandbox, or (perCall) none did.
func assertRanResident(t *testing.T, s *Session, perCall bool, calls int) {
	t.Helper()
	want := calls
	if perCall {
		want = 0
	}
	if got := s.Served().Resident; got != want {
		t.Errorf("%d calls ran in the resident sandbox, want %d", got, want)
	}
}

func allowlistThroughTheHostProxy(t *testing.T, perCall bool) {
	a := testutil.LoopbackServer(t, "127.0.0.1:0", "A")
	b := testutil.LoopbackServer(t, "127.0.0.1:0", "B")
	c := testutil.LoopbackServer(t, "127.0.0.2:0", "C")
	var allow []egress.Target
	for _, s := range []string{"127.0.0.1:" + strconv.Itoa(a), "127.0.0.2/31"} {
		tg, err := egress.ParseTarget(s)
		if err != nil {
			t.Fatal(err)
		}
		allow = append(allow, tg)
	}
	s := newTestSession(t, Options{Policy: Policy{Network: NetworkAllowlist, Allow: allow}, SandboxPerCall: perCall})
	reader := sdkmetric.NewManualReader()
	s.Measure(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	res := sh(t, s, `
echo "proxy=$HTTP_PROXY all=$ALL_PROXY"
curl -sS --max-time 5 "http://127.0.0.1:$1/"; echo " [a http $?]"
curl -sS --max-time 5 --socks5-hostname "${ALL_PROXY#socks5h://}" "http://127.0.0.1:$1/"; echo " [a socks $?]"
curl -sS --max-time 5 "http://127.0.0.2:$3/"; echo " [c cidr $?]"
curl -sS --max-time 5 "http://127.0.0.1:$2/"; echo " [b $?]"
curl -sS --max-time 5 "http://example.invalid/"; echo " [invalid $?]"
curl -sS --max-time 5 -p "http://example.invalid/" 2>&1; echo " [invalid connect $?]"
(exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && echo "direct connection made"
echo done`, strconv.Itoa(a), strconv.Itoa(b), strconv.Itoa(c))
	out := string(res.Stdout)
	for _, want := range []string{
		"proxy=http://127.0.0.1:3128 all=socks5h://127.0.0.1:3128",
		`hello from A auth="" [a http 0]`,
		`hello from A auth="" [a socks 0]`,
		`hello from C auth="" [c cidr 0]`,
		fmt.Sprintf("oma-sandbox egress: refused 127.0.0.1:%d: not in the allowlist\n [b 0]", b),
		"oma-sandbox egress: refused example.invalid:80: not in the allowlist\n [invalid 0]",
		"CONNECT tunnel failed, response 403",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s\nstderr:\n%s", want, out, res.Stderr)
		}
	}
	if strings.Contains(out, "direct connection made") || !strings.HasSuffix(out, "done\n") {
		t.Errorf("the sandbox connected around the proxy:\n%s", out)
	}
	if !strings.Contains(string(res.Stderr), fmt.Sprintf("egress refused 127.0.0.1:%d: not in the allowlist", b)) {
		t.Errorf("refusals not reported on stderr:\n%s", res.Stderr)
	}
	// Port b, and example.invalid by HTTP and by CONNECT.
	if got := testutil.SumsBy(t, reader, egress.RefusalsMetric, "oma.kind"); !maps.Equal(got, map[string]int64{"not_allowed": 3}) {
		t.Errorf("refusals counted: %v, want 3 not_allowed", got)
	}
	assertRanResident(t, s, perCall, 1)
}

// TestSecretThroughTheHostProxy: the command sees only a placeholder; the
// proxy puts the value in the header of a plain HTTP request to the
// secret's host, and refuses the request to another allowed host.
func TestSecretThroughTheHostProxy(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	inBoth(t, secretThroughTheHostProxy)
}

func secretThroughTheHostProxy(t *testing.T, perCall bool) {
	const value = "s3cret-value-never-inside"
	t.Setenv("OMA_TEST_SECRET", value)
	got := make(chan string, 4)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		fmt.Fprint(w, "ok")
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	a := l.Addr().(*net.TCPAddr).Port
	c := testutil.LoopbackServer(t, "127.0.0.2:0", "C")
	var allow []egress.Target
	for _, s := range []string{"127.0.0.1:" + strconv.Itoa(a), "127.0.0.2"} {
		tg, err := egress.ParseTarget(s)
		if err != nil {
			t.Fatal(err)
		}
		allow = append(allow, tg)
	}
	sec, err := egress.ParseSecret("OMA_TEST_SECRET@127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSession(t, Options{Policy: Policy{Network: NetworkAllowlist, Allow: allow, Secrets: []egress.Secret{sec}}, SandboxPerCall: perCall})
	res := sh(t, s, `
echo "seen=$OMA_TEST_SECRET"
env > /workspace/env.txt
curl -sS --max-time 5 -H "Authorization: Bearer $OMA_TEST_SECRET" "http://127.0.0.1:$1/"; echo " [allowed $?]"
curl -sS --max-time 5 -H "Authorization: Bearer $OMA_TEST_SECRET" "http://127.0.0.2:$2/"; echo " [other $?]"
grep -rl "$3" /workspace /tmp /proc/self/environ 2>/dev/null; echo "[grep done]"`, strconv.Itoa(a), strconv.Itoa(c), value)
	out := string(res.Stdout)
	if strings.Contains(out, "seen="+value) || !strings.Contains(out, "seen=oma-secret-OMA_TEST_SECRET-") {
		t.Errorf("the command's variable is not the placeholder:\n%s", out)
	}
	for _, want := range []string{"ok [allowed 0]", "refused 127.0.0.2:" + strconv.Itoa(c) + ": the request carries secret OMA_TEST_SECRET", "\n[grep done]"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s\nstderr:\n%s", want, out, res.Stderr)
		}
	}
	select {
	case auth := <-got:
		if auth != "Bearer "+value {
			t.Errorf("the allowed server got Authorization %q, want the value", auth)
		}
	default:
		t.Error("the allowed server got no request")
	}
	if strings.Contains(out, "/workspace/env.txt") || strings.Contains(out, "environ") {
		t.Errorf("the value is inside the sandbox:\n%s", out)
	}
	assertRanResident(t, s, perCall, 1)
}
