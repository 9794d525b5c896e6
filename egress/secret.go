package egress

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/internal/envname"
)

// Secret is a host environment variable whose value the session may send
// to Hosts only; the guest sees a placeholder in its place.
type Secret struct {
	Env   string
	Hosts []string // domains, *.suffix patterns or IP addresses
}

// ParseSecret parses ENV@HOST[,HOST...]. ENV is a shell variable name;
// each HOST is a domain, *.domain or an IP address (IPv6 without
// brackets; no port). ENV=VALUE@HOST is refused: a value on a command
// line is visible to every process on the host.
func ParseSecret(s string) (Secret, error) {
	bad := func(reason string) (Secret, error) {
		return Secret{}, &Error{Field: "secret", Value: s, Reason: reason}
	}
	env, hosts, ok := strings.Cut(s, "@")
	if !ok {
		return bad("want ENV@HOST[,HOST...]")
	}
	if strings.Contains(env, "=") {
		return bad("give the variable's name, not its value: export it and write ENV@HOST")
	}
	if !envname.Valid(env) {
		return bad("variable name " + strconv.Quote(env) + " is not a shell variable name")
	}
	sec := Secret{Env: env}
	for h := range strings.SplitSeq(hosts, ",") {
		if _, err := netip.ParseAddr(h); err == nil {
			sec.Hosts = append(sec.Hosts, h)
			continue
		}
		name, suffix := strings.CutPrefix(h, "*.")
		name = canonicalName(name)
		if err := checkName(name); err != nil {
			return bad("host " + strconv.Quote(h) + ": " + err.Error())
		}
		if !strings.Contains(name, ".") || isNumeric(name) {
			return bad("host " + strconv.Quote(h) + ": want a domain with a dot, *.domain or an IP address")
		}
		if suffix {
			name = "*." + name
		}
		sec.Hosts = append(sec.Hosts, name)
	}
	return sec, nil
}

// String formats s as ParseSecret reads it.
func (s Secret) String() string { return s.Env + "@" + strings.Join(s.Hosts, ",") }

// MarshalText and UnmarshalText keep a Secret in its written form.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s *Secret) UnmarshalText(b []byte) error {
	v, err := ParseSecret(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// AllowsHost reports whether host (a name or an IP literal, as a request
// names it) is one the secret may be sent to.
func (s Secret) AllowsHost(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		for _, h := range s.Hosts {
			if b, err := netip.ParseAddr(h); err == nil && a.Unmap() == b.Unmap() {
				return true
			}
		}
		return false
	}
	host = canonicalName(host)
	for _, h := range s.Hosts {
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			if matchesSuffix(host, suffix) {
				return true
			}
		} else if host == h {
			return true
		}
	}
	return false
}

// CheckSet reports the first secret whose variable lookup does not find
// (os.LookupEnv in practice): a secret read at create time must be there.
func (p Policy) CheckSet(lookup func(string) (string, bool)) error {
	for _, s := range p.Secrets {
		if _, ok := lookup(s.Env); !ok {
			return &Error{Field: "secret", Value: s.String(), Reason: "environment variable " + s.Env + " is not set"}
		}
	}
	return nil
}
