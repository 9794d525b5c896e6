package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	for _, c := range []struct {
		in, want string // want "" means refused
		why      string // a piece of the refusal
	}{
		{"example.com", "example.com", ""},
		{"Example.COM.", "example.com", ""},
		{"example.com:443", "example.com:443", ""},
		{"*.example.com", "*.example.com", ""},
		{"*.example.com:8080", "*.example.com:8080", ""},
		{"api_v1.example.com", "api_v1.example.com", ""},
		{"127.0.0.1", "127.0.0.1", ""},
		{"127.0.0.1:65535", "127.0.0.1:65535", ""},
		{"10.0.0.0/8", "10.0.0.0/8", ""},
		{"10.0.0.0/8:22", "10.0.0.0/8:22", ""},
		{"[::1]", "[::1]", ""},
		{"[::1]:443", "[::1]:443", ""},
		{"[fd00::/8]", "[fd00::/8]", ""},
		{"[fd00::/8]:53", "[fd00::/8]:53", ""},
		{"", "", "no host"},
		{":80", "", "no host"},
		{"example.com:", "", "port"},
		{"example.com:0", "", "port"},
		{"example.com:65536", "", "port"},
		{"example.com:080", "", "port"},
		{"example.com:http", "", "port"},
		{"example.com:-1", "", "port"},
		{"localhost", "", "single label"},
		{"*.com", "", "two labels"},
		{"*", "", ""},
		{"*.*.example.com", "", "not allowed"},
		{"ex*ample.com", "", "not allowed"},
		{"example..com", "", "empty label"},
		{".example.com", "", "empty label"},
		{"-a.example.com", "", "hyphen"},
		{"a-.example.com", "", "hyphen"},
		{strings.Repeat("a", 64) + ".com", "", "63"},
		{strings.Repeat("a.", 127) + "com", "", "253"},
		{"exa mple.com", "", "not allowed"},
		{"exämple.com", "", "not allowed"},
		{"1.2.3", "", "not an IP"},
		{"300.1.1.1", "", "not an IP"},
		{"10.0.0.1/8", "", "host bits"},
		{"10.0.0.0/33", "", "CIDR"},
		{"::1", "", "brackets"},
		{"fd00::/8:53", "", "brackets"},
		{"[::1", "", "closing"},
		{"[::1]x", "", "PORT"},
		{"[127.0.0.1]", "", "IPv6 addresses only"},
		{"[example.com]", "", "IPv6"},
		{"[fe80::1%eth0]", "", ""},
		{"[::ffff:1.2.3.4]", "", "plain"},
		{"http://example.com", "", ""},
		{"example.com/path", "", "CIDR"},
		{"user@example.com", "", "not allowed"},
	} {
		got, err := ParseTarget(c.in)
		if c.want == "" {
			var pe *Error
			if !errors.As(err, &pe) || pe.Value != c.in || !strings.Contains(err.Error(), c.why) {
				t.Errorf("ParseTarget(%q) = %v, %v; want a refusal naming it (%q)", c.in, got, err, c.why)
			}
			continue
		}
		if err != nil || got.String() != c.want {
			t.Errorf("ParseTarget(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func mustPolicy(t *testing.T, mode Mode, targets ...string) Policy {
	t.Helper()
	p := Policy{Mode: mode}
	for _, s := range targets {
		tg, err := ParseTarget(s)
		if err != nil {
			t.Fatal(err)
		}
		p.Allow = append(p.Allow, tg)
	}
	return p
}

func TestPolicyAllows(t *testing.T) {
	p := mustPolicy(t, Allowlist, "example.com:443", "*.pkg.dev", "127.0.0.1:8080", "10.0.0.0/8", "[fd00::/8]:53")
	names := []struct {
		host string
		port uint16
		want bool
	}{
		{"example.com", 443, true},
		{"EXAMPLE.com.", 443, true},
		{"example.com", 80, false},
		{"www.example.com", 443, false},
		{"pkg.dev", 1, true},
		{"a.b.pkg.dev", 443, true},
		{"evilpkg.dev", 443, false},
		{"pkg.dev.evil.com", 443, false},
		{"example.invalid", 443, false},
		{"127.0.0.1", 8080, false}, // names never match IP targets
	}
	for _, c := range names {
		if got := p.AllowsName(c.host, c.port); got != c.want {
			t.Errorf("AllowsName(%q, %d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	addrs := []struct {
		ip   string
		port uint16
		want bool
	}{
		{"127.0.0.1", 8080, true},
		{"127.0.0.1", 8081, false},
		{"127.0.0.2", 8080, false},
		{"10.255.0.1", 22, true},
		{"11.0.0.1", 22, false},
		{"::ffff:10.0.0.1", 22, true},
		{"fd00::1", 53, true},
		{"fd00::1", 54, false},
		{"::1", 8080, false},
	}
	for _, c := range addrs {
		if got := p.AllowsAddr(netip.MustParseAddr(c.ip), c.port); got != c.want {
			t.Errorf("AllowsAddr(%s, %d) = %v, want %v", c.ip, c.port, got, c.want)
		}
	}
	var deny Policy
	if deny.AllowsName("example.com", 443) || deny.AllowsAddr(netip.MustParseAddr("127.0.0.1"), 80) {
		t.Error("the zero policy allows something")
	}
	open := Policy{Mode: Unrestricted}
	if !open.AllowsName("example.com", 443) || !open.AllowsAddr(netip.MustParseAddr("10.0.0.1"), 80) {
		t.Error("unrestricted refuses something")
	}
}

func TestPolicyValidate(t *testing.T) {
	sec := func(s string) Secret {
		v, err := ParseSecret(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	allow := mustPolicy(t, "", "api.example.com:443", "*.pkg.dev", "127.0.0.1")
	if allow.Effective() != Allowlist {
		t.Errorf("targets without a mode: %s, want allowlist", allow.Effective())
	}
	good := []Policy{
		{}, {Mode: Deny}, {Mode: Unrestricted}, allow,
		{Mode: Unrestricted, Secrets: []Secret{sec("TOKEN@api.example.com")}},
		{Mode: Allowlist, Allow: allow.Allow, Secrets: []Secret{sec("A@api.example.com,x.pkg.dev,*.pkg.dev,127.0.0.1"), sec("B@pkg.dev")}},
	}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", p, err)
		}
	}
	bad := []struct {
		p   Policy
		why string
	}{
		{Policy{Mode: "some"}, "want deny"},
		{Policy{Mode: Allowlist}, "at least one target"},
		{Policy{Mode: Deny, Allow: allow.Allow}, "allowlist only"},
		{Policy{Mode: Unrestricted, Allow: allow.Allow}, "allowlist only"},
		{Policy{Secrets: []Secret{sec("T@example.com")}}, "needs a network"},
		{Policy{Allow: allow.Allow, Secrets: []Secret{sec("T@example.com")}}, "host example.com is not in the allowlist"},
		{Policy{Allow: allow.Allow, Secrets: []Secret{sec("T@*.example.com")}}, "not in the allowlist"},
		{Policy{Allow: allow.Allow, Secrets: []Secret{sec("T@127.0.0.2")}}, "not in the allowlist"},
		{Policy{Allow: allow.Allow, Secrets: []Secret{sec("T@pkg.dev"), sec("T@x.pkg.dev")}}, "given twice"},
		{Policy{Allow: []Target{{Host: "bad host"}}}, "not allowed"},
		{Policy{Mode: Unrestricted, Secrets: []Secret{{Env: "1X", Hosts: []string{"a.b"}}}}, "variable name"},
	}
	for _, c := range bad {
		if err := c.p.Validate(); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("Validate(%+v) = %v, want %q", c.p, err, c.why)
		}
	}
}

func TestParseSecret(t *testing.T) {
	for _, c := range []struct{ in, want, why string }{
		{"TOKEN@api.example.com", "TOKEN@api.example.com", ""},
		{"_t0@API.example.com.,*.pkg.dev,127.0.0.1,::1", "_t0@api.example.com,*.pkg.dev,127.0.0.1,::1", ""},
		{"TOKEN", "", "want ENV@HOST"},
		{"TOKEN=v@example.com", "", "not its value"},
		{"@example.com", "", "variable name"},
		{"0T@example.com", "", "variable name"},
		{"T-1@example.com", "", "variable name"},
		{"T@", "", "host \"\""},
		{"T@example.com,", "", "host \"\""},
		{"T@localhost", "", "dot"},
		{"T@example.com:443", "", "not allowed"},
		{"T@*.com", "", "dot"},
		{"T@a@b.com", "", "not allowed"},
	} {
		got, err := ParseSecret(c.in)
		if c.want == "" {
			var pe *Error
			if !errors.As(err, &pe) || pe.Value != c.in || !strings.Contains(err.Error(), c.why) {
				t.Errorf("ParseSecret(%q) = %v, %v; want a refusal with %q", c.in, got, err, c.why)
			}
			continue
		}
		if err != nil || got.String() != c.want {
			t.Errorf("ParseSecret(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	p := Policy{Mode: Unrestricted, Secrets: []Secret{{Env: "SET", Hosts: []string{"a.b"}}, {Env: "MISSING", Hosts: []string{"a.b"}}}}
	err := p.CheckSet(func(k string) (string, bool) { return "", k == "SET" })
	if err == nil || !strings.Contains(err.Error(), "environment variable MISSING is not set") {
		t.Errorf("CheckSet = %v, want MISSING named", err)
	}
}

// FuzzParseTarget: whatever is accepted prints back to itself, parses
// again to the same target, and never matches more than its own kind.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"example.com", "*.a.b:1", "10.0.0.0/8:22", "[::1]:443", "[fd00::/8]", "1.2.3.4", "a..b", "[::1", ":0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseTarget(s)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Value != s {
				t.Fatalf("ParseTarget(%q): %v does not name the token", s, err)
			}
			return
		}
		again, err := ParseTarget(tg.String())
		if err != nil || again != tg || again.String() != tg.String() {
			t.Fatalf("ParseTarget(%q) = %q, which reads back as %q, %v", s, tg, again, err)
		}
		if tg.Prefix.IsValid() == (tg.Host != "") {
			t.Fatalf("ParseTarget(%q) = %+v: exactly one of host and prefix must be set", s, tg)
		}
		if strings.ContainsAny(tg.String(), " ,@\x00\n") {
			t.Fatalf("ParseTarget(%q) = %q carries a separator", s, tg)
		}
	})
}

func TestSecretAllowsHost(t *testing.T) {
	s, err := ParseSecret("T@api.example.com,*.pkg.dev,10.0.0.1,::1")
	if err != nil {
		t.Fatal(err)
	}
	for h, want := range map[string]bool{
		"api.example.com": true, "API.example.com.": true, "x.api.example.com": false, "example.com": false,
		"pkg.dev": true, "a.b.pkg.dev": true, "evilpkg.dev": false,
		"10.0.0.1": true, "::ffff:10.0.0.1": true, "10.0.0.2": false, "::1": true, "": false,
	} {
		if got := s.AllowsHost(h); got != want {
			t.Errorf("AllowsHost(%q) = %v, want %v", h, got, want)
		}
	}
}

// FuzzParseSecret: an accepted secret prints back to itself, never holds a
// value, and each host is one the secret allows.
func FuzzParseSecret(f *testing.F) {
	for _, s := range []string{"T@a.b", "T@*.a.b,1.2.3.4,::1", "T=v@a.b", "@", "T@a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sec, err := ParseSecret(s)
		if err != nil {
			return
		}
		again, err := ParseSecret(sec.String())
		if err != nil || again.String() != sec.String() || strings.Contains(sec.Env, "=") {
			t.Fatalf("ParseSecret(%q) = %q, reads back as %q, %v", s, sec, again, err)
		}
		for _, h := range sec.Hosts {
			if !sec.AllowsHost(strings.TrimPrefix(h, "*.")) {
				t.Fatalf("ParseSecret(%q): host %q not allowed by its own secret", s, h)
			}
		}
	})
}
