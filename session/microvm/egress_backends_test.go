//go:build linux

package microvm_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
)

// egressFixture is the allowlist scenario's servers and policy: A on
// 127.0.0.1 allowed by IP:port (and the secret's host), D on 127.0.0.1
// on a port not allowed, C on 127.0.0.2 allowed by a CIDR, and
// *.test.example allowed by suffix (resolvable only where the backend
// takes a test resolver: api.test.example is 127.0.0.2).
type egressFixture struct {
	a, c, d int
	policy  egress.Policy
}

const egressSecretValue = "egress-secret-value-never-inside"

func newEgressFixture(t *testing.T) egressFixture {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	t.Setenv("OMA_EGRESS_SECRET", egressSecretValue)
	f := egressFixture{
		a: testutil.LoopbackServer(t, "127.0.0.1:0", "A"),
		d: testutil.LoopbackServer(t, "127.0.0.1:0", "D"),
		c: testutil.LoopbackServer(t, "127.0.0.2:0", "C"),
	}
	f.policy.Mode = egress.Allowlist
	for _, s := range []string{"127.0.0.1:" + strconv.Itoa(f.a), "127.0.0.2/31", "*.test.example"} {
		tg, err := egress.ParseTarget(s)
		require.NoError(t, err)
		f.policy.Allow = append(f.policy.Allow, tg)
	}
	sec, err := egress.ParseSecret("OMA_EGRESS_SECRET@127.0.0.1")
	require.NoError(t, err)
	f.policy.Secrets = []egress.Secret{sec}
	return f
}

// run checks the scenario on s. withNames: the backend resolves the
// test's names, so the suffix rule can be exercised.
func (f egressFixture) run(t *testing.T, s session.Session, withNames bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	script := `
printf 'secret=%s\n' "$OMA_EGRESS_SECRET"
curl -sS --max-time 5 -H "Authorization: $OMA_EGRESS_SECRET" "http://127.0.0.1:$1/"; echo " [a $?]"
curl -sS --max-time 5 --socks5-hostname "${ALL_PROXY#socks5h://}" "http://127.0.0.1:$1/"; echo " [a socks $?]"
curl -sS --max-time 5 "http://127.0.0.2:$3/"; echo " [c cidr $?]"
curl -sS --max-time 5 "http://127.0.0.1:$2/"; echo " [d $?]"
curl -sS --max-time 5 -H "Authorization: $OMA_EGRESS_SECRET" "http://127.0.0.2:$3/"; echo " [c secret $?]"
if [ "$5" = names ]; then
curl -sS --max-time 5 "http://api.test.example:$3/"; echo " [suffix $?]"
curl -sS --max-time 5 "http://rebind.test.example:$2/"; echo " [rebind $?]"
curl -sS --max-time 5 "http://other.example:$1/"; echo " [other $?]"
fi
(exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && echo "direct connection made"
env; grep -rl "$4" /tmp /run /var/tmp /dev/shm "$HOME" /proc/self/environ 2>/dev/null; echo done`
	names := "no-names"
	if withNames {
		names = "names"
	}
	res, err := s.Shell(ctx, session.Command{Script: script, Args: []string{
		strconv.Itoa(f.a), strconv.Itoa(f.d), strconv.Itoa(f.c), egressSecretValue, names}}, session.ShellOptions{})
	require.NoError(t, err)
	out := string(res.Stdout)
	want := []string{
		`hello from A auth="` + egressSecretValue + `" [a 0]`,
		`hello from A auth="" [a socks 0]`,
		`hello from C auth="" [c cidr 0]`,
		fmt.Sprintf("oma-sandbox egress: refused 127.0.0.1:%d: not in the allowlist\n [d 0]", f.d),
		fmt.Sprintf("oma-sandbox egress: refused 127.0.0.2:%d: the request carries secret OMA_EGRESS_SECRET", f.c),
	}
	if withNames {
		want = append(want,
			`hello from C auth="" [suffix 0]`,
			fmt.Sprintf("oma-sandbox egress: refused rebind.test.example:%d: it resolves to 127.0.0.1, a non-public address the allowlist does not name\n [rebind 0]", f.d),
			fmt.Sprintf("oma-sandbox egress: refused other.example:%d: not in the allowlist\n [other 0]", f.a))
	}
	for _, w := range want {
		assert.Contains(t, out, w, "stderr: %s", res.Stderr)
	}
	assert.NotContains(t, out, "secret=\n", "the command sees a placeholder")
	assert.NotContains(t, out, "direct connection made")
	assert.True(t, strings.HasSuffix(out, "done\n"), out)
	assert.Equal(t, 1, strings.Count(out, egressSecretValue), "the value appears only in the allowed server's answer, never in env or files:\n%s", out)
}

// TestAllowlistOnFakemsb runs the scenario on the msb backend over
// fakemsb, which enforces the rules msb is given as the local backend
// does; FAKEMSB_HOSTS resolves the test's names.
func TestAllowlistOnFakemsb(t *testing.T) {
	f := newEgressFixture(t)
	env := fakemsbtest.New(t)
	env.SetKnob("FAKEMSB_HOSTS", "api.test.example=127.0.0.2,rebind.test.example=127.0.0.1,other.example=127.0.0.1")
	o := options(env)
	o.Network = f.policy
	s := createSession(t, o)
	f.run(t, s, true)
}

// TestAllowlistOnLocal runs the same scenario on the local backend. Its
// proxy uses the system resolver, which knows none of the test's names,
// so the suffix and rebinding cases are left to fakemsb and egress's own
// tests.
func TestAllowlistOnLocal(t *testing.T) {
	f := newEgressFixture(t)
	s, err := local.Create(context.Background(), local.Options{
		StateDir: t.TempDir(),
		Policy:   local.Policy{Network: local.NetworkAllowlist, Allow: f.policy.Allow, Secrets: f.policy.Secrets},
	})
	if err != nil {
		t.Skipf("local backend unavailable here: %v", err)
	}
	defer s.Close(context.Background())
	f.run(t, s, false)
}
