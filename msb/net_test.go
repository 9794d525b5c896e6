package msb

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestNetArgv(t *testing.T) {
	o := CreateOptions{
		Image: "alpine", Name: "box1", NetDefaultEgress: "deny",
		NetRules: []NetRule{
			{Action: "allow", Target: "example.com", Protocol: "tcp", Ports: "443"},
			{Action: "allow", Target: "*.pkg.dev"},
			{Action: "allow", Target: "10.0.0.0/8", Protocol: "tcp", Ports: "1-1024"},
			{Action: "allow", Target: "[fd00::/8]", Protocol: "udp", Ports: "53"},
			{Action: "deny", Target: "[::1]", Protocol: "any"},
			{Action: "allow", Target: "127.0.0.1", Protocol: "tcp", Ports: "any"},
		},
		Secrets:           []SecretRef{{Env: "TOKEN", Hosts: []string{"api.example.com", "*.pkg.dev"}}},
		OnSecretViolation: "block-and-log",
	}
	got, err := o.Args()
	want := strings.Fields("create alpine --name box1 --net-default-egress deny " +
		"--net-rule allow@example.com:tcp:443 --net-rule allow@*.pkg.dev --net-rule allow@10.0.0.0/8:tcp:1-1024 " +
		"--net-rule allow@[fd00::/8]:udp:53 --net-rule deny@[::1]:any --net-rule allow@127.0.0.1:tcp:any " +
		"--secret TOKEN@api.example.com,*.pkg.dev --on-secret-violation block-and-log")
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Args = %q, %v\nwant %q", got, err, want)
	}
}

func TestNetRefusals(t *testing.T) {
	rule := func(r NetRule) CreateOptions {
		return CreateOptions{Image: "alpine", Name: "box1", NoNet: true, NetRules: []NetRule{r}}
	}
	for _, c := range []struct {
		o     CreateOptions
		field string
	}{
		{CreateOptions{Image: "a", Name: "b", NetDefaultEgress: "open"}, "net default egress"},
		{CreateOptions{Image: "a", Name: "b", NoNet: true, NetDefaultEgress: "deny"}, "net default egress"},
		{rule(NetRule{Action: "permit", Target: "example.com"}), "net rule action"},
		{rule(NetRule{Action: "allow", Target: ""}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "example.com:443"}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "a.com,deny@b.com"}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "domain=x.com"}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "::1"}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "[::1"}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "[127.0.0.1]"}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "10.0.0.0/33"}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "localhost"}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "-x.com"}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "a b.com"}), "net rule target"},
		{rule(NetRule{Action: "allow", Target: "a.com", Protocol: "sctp"}), "net rule protocol"},
		{rule(NetRule{Action: "allow", Target: "a.com", Ports: "443"}), "net rule ports"},
		{rule(NetRule{Action: "allow", Target: "a.com", Protocol: "tcp", Ports: "0"}), "net rule ports"},
		{rule(NetRule{Action: "allow", Target: "a.com", Protocol: "tcp", Ports: "65536"}), "net rule ports"},
		{rule(NetRule{Action: "allow", Target: "a.com", Protocol: "tcp", Ports: "9-8"}), "net rule ports"},
		{rule(NetRule{Action: "allow", Target: "a.com", Protocol: "tcp", Ports: "1-"}), "net rule ports"},
		{CreateOptions{Image: "a", Name: "b", Secrets: []SecretRef{{Env: "T=v", Hosts: []string{"a.com"}}}}, "secret variable"},
		{CreateOptions{Image: "a", Name: "b", Secrets: []SecretRef{{Env: "T"}}}, "secret hosts"},
		{CreateOptions{Image: "a", Name: "b", Secrets: []SecretRef{{Env: "T", Hosts: []string{"a.com,b.com"}}}}, "secret host"},
		{CreateOptions{Image: "a", Name: "b", Secrets: []SecretRef{{Env: "T", Hosts: []string{"-a.com"}}}}, "secret host"},
		{CreateOptions{Image: "a", Name: "b", OnSecretViolation: "block"}, "on secret violation"},
		{CreateOptions{Image: "a", Name: "b", Secrets: []SecretRef{{Env: "T", Hosts: []string{"a.com"}}}, OnSecretViolation: "ignore"}, "on secret violation"},
	} {
		args, err := c.o.Args()
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("Args(%+v) = %q, %v; want a refusal of %s", c.o, args, err, c.field)
		}
	}
}

// TestCreatePassesSecretValues: msb reads a secret from its environment,
// which the runner scrubs, so Create hands each variable to that one call;
// a missing variable is refused before msb runs.
func TestCreatePassesSecretValues(t *testing.T) {
	t.Setenv("OMA_TEST_TOKEN", "s3cret")
	r := &recorder{}
	o := CreateOptions{Image: "alpine", Name: "b", Secrets: []SecretRef{{Env: "OMA_TEST_TOKEN", Hosts: []string{"a.com"}}}}
	if err := NewClient(r).Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if len(r.calls) != 1 || !slices.Equal(r.calls[0].Env, []string{"OMA_TEST_TOKEN=s3cret"}) {
		t.Fatalf("calls = %+v, want the secret's variable in Env", r.calls)
	}
	o.Secrets[0].Env = "OMA_TEST_UNSET_TOKEN"
	r = &recorder{}
	err := NewClient(r).Create(context.Background(), o)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "OMA_TEST_UNSET_TOKEN") || len(r.calls) != 0 {
		t.Fatalf("Create with an unset secret = %v after %d calls; want a refusal naming it", err, len(r.calls))
	}
}
