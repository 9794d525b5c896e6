package msb

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/internal/envname"
)

// token renders ACTION[:DIRECTION]@TARGET[:PROTOCOL[:PORTS]] in msb 0.6.18's grammar.
// msb reads a comma as the start of another token and a ':' in the target
// as the next field, so the target is checked for both (IPv6 goes in
// brackets).
func (r NetRule) token() (string, error) {
	if err := checkEnum("net rule action", r.Action, "allow", "deny"); err != nil {
		return "", err
	}
	if err := checkNetTarget("net rule target", r.Target); err != nil {
		return "", err
	}
	tok := r.Action
	if r.Direction != "" {
		if err := checkEnum("net rule direction", r.Direction, "egress", "ingress", "any"); err != nil {
			return "", err
		}
		tok += ":" + r.Direction
	}
	tok += "@" + r.Target
	if r.Protocol != "" {
		if err := checkEnum("net rule protocol", r.Protocol, "any", "tcp", "udp", "icmpv4", "icmpv6"); err != nil {
			return "", err
		}
		tok += ":" + r.Protocol
	}
	if r.Ports != "" {
		if r.Protocol == "" {
			return "", invalid("net rule ports", r.Ports, "need a protocol (msb reads TARGET:PROTOCOL:PORTS)")
		}
		if err := checkPorts(r.Ports); err != nil {
			return "", err
		}
		tok += ":" + r.Ports
	}
	return tok, nil
}

// checkNetTarget accepts what msb 0.6.18 reads as one target: an IPv4
// address or CIDR, a bracketed IPv6 address or CIDR, a domain with a dot
// or a *.suffix of one (msb checks the DNS syntax itself), or one of msb's
// keywords.
func checkNetTarget(field, t string) error {
	if err := checkWord(field, t); err != nil {
		return err
	}
	switch t {
	case "any", "dns", "public", "private", "loopback", "link-local", "meta", "multicast", "host":
		return nil
	}
	if inner, ok := strings.CutPrefix(t, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		if !ok {
			return invalid(field, t, "an IPv6 target needs its closing ]")
		}
		if a, err := netip.ParseAddr(inner); err == nil && a.Is6() && a.Zone() == "" {
			return nil
		}
		if p, err := netip.ParsePrefix(inner); err == nil && p.Addr().Is6() {
			return nil
		}
		return invalid(field, t, "not an IPv6 address or CIDR")
	}
	if strings.ContainsAny(t, ":,@=[]") {
		return invalid(field, t, "must not contain ':', ',', '@', '=' or brackets (IPv6 goes in [ ])")
	}
	if strings.Contains(t, "/") {
		if p, err := netip.ParsePrefix(t); err != nil || !p.Addr().Is4() {
			return invalid(field, t, "not an IPv4 CIDR")
		}
		return nil
	}
	if _, err := netip.ParseAddr(t); err == nil {
		return nil
	}
	if !strings.Contains(strings.TrimPrefix(t, "*."), ".") {
		return invalid(field, t, "a domain needs a dot (msb reads a single label as a keyword)")
	}
	return nil
}

// checkPorts accepts any, PORT or LO-HI with 0 < LO <= HI < 65536.
func checkPorts(p string) error {
	if p == "any" {
		return nil
	}
	lo, hi, isRange := strings.Cut(p, "-")
	if !isRange {
		hi = lo
	}
	l, err1 := strconv.ParseUint(lo, 10, 16)
	h, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil || l == 0 || l > h {
		return invalid("net rule ports", p, "want any, a port from 1 to 65535 or LO-HI")
	}
	return nil
}

// spec renders ENV@HOST[,HOST...]. msb reads the value from its own
// environment, so ENV must be a plain variable name; ENV=VALUE would put
// the value on the command line and msb refuses it.
func (s SecretRef) spec() (string, error) {
	if !envname.Valid(s.Env) {
		return "", invalid("secret variable", s.Env, "must be a shell variable name")
	}
	if len(s.Hosts) == 0 {
		return "", invalid("secret hosts", s.Env, "at least one host is required")
	}
	for _, h := range s.Hosts {
		if err := checkWord("secret host", h); err != nil {
			return "", err
		}
		if strings.ContainsAny(h, ",@=/[]") {
			return "", invalid("secret host", h, "must be a domain, *.domain or an IP address")
		}
	}
	return s.Env + "@" + strings.Join(s.Hosts, ","), nil
}

// secretEnv is what msb needs to read o's secrets: each variable from the
// host environment. The runner passes nothing else from the host, and a
// missing variable is refused here rather than sent as empty.
func (o CreateOptions) secretEnv(lookup func(string) (string, bool)) ([]string, error) {
	var env []string
	for _, s := range o.Secrets {
		v, ok := lookup(s.Env)
		if !ok {
			return nil, invalid("secret variable", s.Env, "is not set in the environment")
		}
		env = append(env, s.Env+"="+v)
	}
	return env, nil
}
