package microvm_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

func policy(t *testing.T, mode egress.Mode, targets []string, secrets ...string) egress.Policy {
	t.Helper()
	p := egress.Policy{Mode: mode}
	for _, s := range targets {
		tg, err := egress.ParseTarget(s)
		require.NoError(t, err)
		p.Allow = append(p.Allow, tg)
	}
	for _, s := range secrets {
		sec, err := egress.ParseSecret(s)
		require.NoError(t, err)
		p.Secrets = append(p.Secrets, sec)
	}
	return p
}

// netFlags is the part of create's argv from --workdir's value to the
// first --tmpfs: where the builder puts the network flags.
func netFlags(argv []string) string {
	i := slices.Index(argv, "--workdir")
	j := slices.Index(argv, "--tmpfs")
	return strings.Join(argv[i+2:j], " ")
}

func TestCreateMapsTheNetworkPolicy(t *testing.T) {
	t.Setenv("OMA_TEST_API_TOKEN", "v")
	cases := []struct {
		name string
		p    egress.Policy
		want string
	}{
		{"default denies", egress.Policy{}, "--no-net"},
		{"deny", egress.Policy{Mode: egress.Deny}, "--no-net"},
		{"unrestricted is msb's default", egress.Policy{Mode: egress.Unrestricted}, ""},
		{"allowlist", policy(t, "", []string{"api.example.com:443", "*.pkg.dev", "127.0.0.1:8080", "10.0.0.0/8", "[fd00::1]:53", "[fd00::/8]"}, "OMA_TEST_API_TOKEN@api.example.com"),
			"--no-net --net-rule allow@api.example.com:tcp:443 --net-rule allow@*.pkg.dev --net-rule allow@127.0.0.1:tcp:8080 " +
				"--net-rule allow@10.0.0.0/8 --net-rule allow@[fd00::1]:tcp:53 --net-rule allow@[fd00::/8] " +
				"--secret OMA_TEST_API_TOKEN@api.example.com --on-secret-violation block-and-log"},
		{"the host's loopback", policy(t, "", []string{"host.microsandbox.internal:8080"}),
			"--no-net --net-rule allow@host:tcp:8080 --net-rule allow@host.microsandbox.internal"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := fakemsbtest.New(t)
			o := options(env)
			o.Network = c.p
			createSession(t, o)
			assert.Equal(t, c.want, netFlags(argvs(t, env)[0]))
		})
	}
}

// A bad policy or a secret whose variable is not set is refused before
// msb runs, naming what is wrong.
func TestCreateRefusesBadNetworkPolicies(t *testing.T) {
	cases := []struct {
		name string
		p    egress.Policy
		want string
	}{
		{"empty allowlist", egress.Policy{Mode: egress.Allowlist}, "at least one target"},
		{"secret under deny", policy(t, egress.Deny, nil, "T@a.example.com"), "needs a network"},
		{"secret host not allowed", policy(t, "", []string{"a.example.com"}, "OMA_TEST_API_TOKEN@b.example.com"), "b.example.com is not in the allowlist"},
		{"secret not set", policy(t, "", []string{"a.example.com"}, "OMA_TEST_UNSET_TOKEN@a.example.com"), "environment variable OMA_TEST_UNSET_TOKEN is not set"},
	}
	t.Setenv("OMA_TEST_API_TOKEN", "v")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := fakemsbtest.New(t)
			o := options(env)
			o.Network = c.p
			_, err := microvm.Create(context.Background(), o)
			require.ErrorIs(t, err, session.ErrInvalid)
			assert.Contains(t, err.Error(), c.want)
			assert.Empty(t, argvs(t, env), "msb ran")
		})
	}
}
