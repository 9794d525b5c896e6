//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// TestAllowlistIsEnforced: a sandbox created with --no-net and allow
// rules reaches the allowed loopback servers (an IP:port, a CIDR, a
// *.suffix resolved through FAKEMSB_HOSTS, not rebound to a loopback
// address the rules do not name) through the proxy variables and
// is refused the others; its secret is a placeholder inside, the value
// reaches only the secret's host, is kept 0600 outside the guest and goes
// with the sandbox.
func TestAllowlistIsEnforced(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	a := testutil.LoopbackServer(t, "127.0.0.1:0", "A")
	d := testutil.LoopbackServer(t, "127.0.0.1:0", "D")
	c := testutil.LoopbackServer(t, "127.0.0.2:0", "C")
	const value = "fakemsb-secret-value"
	f := newFx(t)
	f.guestImage = true // the guest image's unprivileged user
	hosts := "FAKEMSB_HOSTS=api.test.example=127.0.0.2,rebind.test.example=127.0.0.1,other.example=127.0.0.1"
	f.env = []string{hosts, "OMA_FAKE_SECRET=" + value}
	f.ok("create", "--name", "box", "--no-net",
		"--net-rule", "allow@127.0.0.1:tcp:"+strconv.Itoa(a), "--net-rule", "allow@127.0.0.2/31",
		"--net-rule", "allow@*.test.example",
		"--secret", "OMA_FAKE_SECRET@127.0.0.1", "--on-secret-violation", "block-and-log", "alpine")
	f.env = []string{hosts}

	secrets := filepath.Join(f.home, "secrets", "box.json")
	fi, err := os.Stat(secrets)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	r := f.ok("exec", "box", "--", "sh", "-c", `
echo "seen=$OMA_FAKE_SECRET"
curl -sS --max-time 5 -H "Authorization: $OMA_FAKE_SECRET" "http://127.0.0.1:$1/"; echo " [a $?]"
curl -sS --max-time 5 --socks5-hostname "${ALL_PROXY#socks5h://}" "http://127.0.0.1:$1/"; echo " [a socks $?]"
curl -sS --max-time 5 "http://127.0.0.2:$3/"; echo " [c cidr $?]"
curl -sS --max-time 5 "http://api.test.example:$3/"; echo " [suffix $?]"
curl -sS --max-time 5 "http://rebind.test.example:$2/"; echo " [rebind $?]"
curl -sS --max-time 5 "http://127.0.0.1:$2/"; echo " [d $?]"
curl -sS --max-time 5 "http://other.example:$1/"; echo " [other name $?]"
curl -sS --max-time 5 -H "Authorization: $OMA_FAKE_SECRET" "http://127.0.0.2:$3/"; echo " [c secret $?]"
(exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && echo "direct connection made"
env; grep -rl "$4" /tmp /workspace /run /var/tmp /dev/shm /proc/self/environ 2>/dev/null; echo done`,
		"sh", strconv.Itoa(a), strconv.Itoa(d), strconv.Itoa(c), value)
	out := r.stdout
	for _, want := range []string{
		"seen=$MSB_OMA_FAKE_SECRET\n",
		`hello from A auth="` + value + `" [a 0]`,
		`hello from A auth="" [a socks 0]`,
		`hello from C auth="" [c cidr 0]`,
		`hello from C auth="" [suffix 0]`,
		fmt.Sprintf("oma-sandbox egress: refused rebind.test.example:%d: it resolves to 127.0.0.1, a non-public address the allowlist does not name\n [rebind 0]", d),
		fmt.Sprintf("oma-sandbox egress: refused 127.0.0.1:%d: not in the allowlist\n [d 0]", d),
		fmt.Sprintf("oma-sandbox egress: refused other.example:%d: not in the allowlist\n [other name 0]", a),
		fmt.Sprintf("oma-sandbox egress: refused 127.0.0.2:%d: the request carries secret OMA_FAKE_SECRET", c),
	} {
		assert.Contains(t, out, want, "stderr: %s", r.stderr)
	}
	assert.NotContains(t, out, "direct connection made")
	assert.True(t, strings.HasSuffix(out, "done\n"), out)
	assert.Equal(t, 1, strings.Count(out, value), "the value appears only in the allowed server's answer:\n%s", out)

	log, err := os.ReadFile(filepath.Join(f.home, "run", "box.egress.log"))
	require.NoError(t, err)
	assert.Contains(t, string(log), fmt.Sprintf("egress refused 127.0.0.1:%d: not in the allowlist", d))

	ents, err := os.ReadDir(filepath.Join(f.home, "egress", "box"))
	require.NoError(t, err)
	require.Len(t, ents, 1, "the exec's socket is gone, the relay stays")

	f.ok("remove", "--force", "box")
	for _, p := range []string{secrets, filepath.Join(f.home, "egress", "box")} {
		_, err := os.Stat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, p)
	}
}

// TestUnenforceablePolicyFailsClosed: a policy fakemsb cannot express
// through its proxy (a group target) still gives no network at all, and
// keeps no secret value.
func TestUnenforceablePolicyFailsClosed(t *testing.T) {
	f := newFx(t)
	f.env = []string{"OMA_FAKE_SECRET=v"}
	f.ok("create", "--name", "box", "--no-net", "--net-rule", "allow@public", "--secret", "OMA_FAKE_SECRET@example.com", "alpine")
	_, err := os.Stat(filepath.Join(f.home, "secrets", "box.json"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no proxy will use the value: it is not kept")
	r := f.ok("exec", "box", "--", "sh", "-c", `echo "proxy=$HTTP_PROXY"; ls /run/oma-egress 2>&1 >/dev/null | head -c0; test -e /run/oma-egress || echo none`)
	assert.Equal(t, "proxy=\nnone\n", r.stdout)
}

func TestBadHostsKnob(t *testing.T) {
	f := newFx(t)
	f.env = []string{"FAKEMSB_HOSTS=nope"}
	r := f.run("list")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `FAKEMSB_HOSTS: entry "nope": want NAME=IP`)
}
