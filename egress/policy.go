// Package egress is the network policy of a session, shared by every
// backend: deny (the default), unrestricted, or an allowlist of targets,
// plus secrets that may only be sent to named hosts. It parses and
// validates what the CLI and library callers give, and answers whether a
// destination is allowed; the backends enforce it (msb natively, the local
// backend through this package's proxy).
package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Mode is how much of the network a session reaches.
type Mode string

const (
	// Deny gives the session no network at all (loopback only).
	Deny Mode = "deny"
	// Unrestricted lets the session reach out freely (on msb: msb's
	// default, public addresses only).
	Unrestricted Mode = "unrestricted"
	// Allowlist lets the session reach the policy's targets only.
	Allowlist Mode = "allowlist"
)

// ParseMode parses a mode as the CLI spells it.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Deny, Unrestricted, Allowlist:
		return m, nil
	}
	return "", &Error{Field: "network", Value: s, Reason: "want deny, unrestricted or allowlist"}
}

// Error reports a refused policy value. Value is the offending token.
type Error struct {
	Field  string
	Value  string
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Reason)
}

// Policy is a session's network policy. The zero value is Deny.
type Policy struct {
	Mode    Mode     `json:"mode,omitempty"`
	Allow   []Target `json:"allow,omitempty"`
	Secrets []Secret `json:"secrets,omitempty"`
}

// Effective returns the policy's mode with the default filled in: Deny
// when unset, Allowlist when targets are given without a mode.
func (p Policy) Effective() Mode {
	switch {
	case p.Mode != "":
		return p.Mode
	case len(p.Allow) > 0:
		return Allowlist
	}
	return Deny
}

// Validate checks the policy's consistency: a known mode, targets only
// with an allowlist and at least one there, secrets only where the
// network is reachable, every secret's host allowed by the allowlist, no
// secret named twice.
func (p Policy) Validate() error {
	mode := p.Effective()
	if _, err := ParseMode(string(mode)); err != nil {
		return err
	}
	for _, t := range p.Allow {
		if _, err := ParseTarget(t.String()); err != nil {
			return err
		}
	}
	switch {
	case mode != Allowlist && len(p.Allow) > 0:
		return &Error{Field: "network", Value: string(mode), Reason: "allowed targets go with an allowlist only"}
	case mode == Allowlist && len(p.Allow) == 0:
		return &Error{Field: "network", Value: string(mode), Reason: "an allowlist needs at least one target"}
	case mode == Deny && len(p.Secrets) > 0:
		return &Error{Field: "secret", Value: p.Secrets[0].String(), Reason: "a secret needs a network; the policy denies all of it"}
	}
	seen := map[string]bool{}
	for _, s := range p.Secrets {
		if _, err := ParseSecret(s.String()); err != nil {
			return err
		}
		if seen[s.Env] {
			return &Error{Field: "secret", Value: s.String(), Reason: "variable " + s.Env + " given twice"}
		}
		seen[s.Env] = true
		if mode != Allowlist {
			continue
		}
		for _, h := range s.Hosts {
			if !p.coversHost(h) {
				return &Error{Field: "secret", Value: s.String(), Reason: "host " + h + " is not in the allowlist"}
			}
		}
	}
	return nil
}

// coversHost reports whether a secret host pattern is wholly inside the
// allowlist (on some port).
func (p Policy) coversHost(h string) bool {
	suffix, isSuffix := strings.CutPrefix(h, "*.")
	for _, t := range p.Allow {
		switch {
		case t.Prefix.IsValid():
			if a, err := netip.ParseAddr(h); err == nil && t.Prefix.Contains(a) {
				return true
			}
		case isSuffix:
			if t.Suffix && matchesSuffix(suffix, t.Host) {
				return true
			}
		case t.matchName(h):
			return true
		}
	}
	return false
}

// AllowsName reports whether a connection to DNS name host on port is
// allowed, before any resolution. IP literals go to AllowsAddr.
func (p Policy) AllowsName(host string, port uint16) bool {
	switch p.Effective() {
	case Unrestricted:
		return true
	case Allowlist:
		host = canonicalName(host)
		return slices.ContainsFunc(p.Allow, func(t Target) bool { return t.portOK(port) && t.matchName(host) })
	}
	return false
}

// AllowsAddr reports whether a connection to ip on port is allowed by an
// IP or CIDR target.
func (p Policy) AllowsAddr(ip netip.Addr, port uint16) bool {
	switch p.Effective() {
	case Unrestricted:
		return true
	case Allowlist:
		ip = ip.Unmap()
		return slices.ContainsFunc(p.Allow, func(t Target) bool {
			return t.portOK(port) && t.Prefix.IsValid() && t.Prefix.Contains(ip)
		})
	}
	return false
}

// Target is one allowlist entry: a DNS name (Host), a domain with all its
// subdomains (Host with Suffix, written *.Host), or an address range
// (Prefix; a single IP is a /32 or /128); Port 0 means every port.
type Target struct {
	Host   string
	Suffix bool
	Prefix netip.Prefix
	Port   uint16
}

// ParseTarget parses example.com, *.example.com, 192.0.2.1, 10.0.0.0/8,
// [2001:db8::1] or [2001:db8::/32], each optionally followed by :PORT.
// IPv6 needs the brackets, so its colons cannot be read as a port. A
// domain is lower-cased and loses a trailing dot; *.example.com also
// matches example.com itself, as msb's suffix rules do.
func ParseTarget(s string) (Target, error) {
	bad := func(reason string) (Target, error) {
		return Target{}, &Error{Field: "allowed target", Value: s, Reason: reason}
	}
	host, port := s, ""
	if rest, ok := strings.CutPrefix(s, "["); ok {
		inner, after, ok := strings.Cut(rest, "]")
		if !ok {
			return bad("an IPv6 address needs its closing ]")
		}
		if after != "" {
			p, ok := strings.CutPrefix(after, ":")
			if !ok {
				return bad("want [IPV6] or [IPV6]:PORT")
			}
			port = p
		}
		host = inner
		if !strings.Contains(host, ":") {
			return bad("brackets are for IPv6 addresses only")
		}
	} else if strings.Count(s, ":") > 1 {
		return bad("write an IPv6 address in brackets, such as [2001:db8::1]:443")
	} else if h, p, ok := strings.Cut(s, ":"); ok {
		host, port = h, p
	}
	var t Target
	if port != "" || strings.HasSuffix(s, ":") {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 || port[0] == '0' {
			return bad("port must be a number from 1 to 65535")
		}
		t.Port = uint16(n)
	}
	if host == "" {
		return bad("no host")
	}
	if strings.Contains(host, "/") {
		pfx, err := netip.ParsePrefix(host)
		if err != nil {
			return bad("not a CIDR such as 10.0.0.0/8")
		}
		if pfx.Addr().Zone() != "" {
			return bad("an address zone is not allowed")
		}
		if pfx != pfx.Masked() {
			return bad("host bits are set; did you mean " + pfx.Masked().String() + "?")
		}
		t.Prefix = pfx
		return t, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" || a.Is4In6() {
			return bad("want a plain IPv4 or IPv6 address")
		}
		t.Prefix = netip.PrefixFrom(a, a.BitLen())
		return t, nil
	}
	if strings.Contains(s, "[") {
		return bad("not an IPv6 address")
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		t.Suffix, host = true, rest
	}
	name := canonicalName(host)
	if err := checkName(name); err != nil {
		return bad(err.Error())
	}
	if !strings.Contains(name, ".") {
		if t.Suffix {
			return bad("a suffix needs at least two labels, such as *.example.com")
		}
		return bad("a domain needs a dot; a single label is ambiguous")
	}
	if isNumeric(name) {
		return bad("not an IP address and not a domain")
	}
	t.Host = name
	return t, nil
}

// String formats t as ParseTarget reads it.
func (t Target) String() string {
	var h string
	switch {
	case t.Prefix.IsValid() && t.Prefix.IsSingleIP():
		h = t.Prefix.Addr().String()
		if t.Prefix.Addr().Is6() {
			h = "[" + h + "]"
		}
	case t.Prefix.IsValid():
		h = t.Prefix.String()
		if t.Prefix.Addr().Is6() {
			h = "[" + h + "]"
		}
	case t.Suffix:
		h = "*." + t.Host
	default:
		h = t.Host
	}
	if t.Port != 0 {
		h += ":" + strconv.Itoa(int(t.Port))
	}
	return h
}

// MarshalText and UnmarshalText keep a Target in its written form in
// JSON (session records).
func (t Target) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

func (t *Target) UnmarshalText(b []byte) error {
	v, err := ParseTarget(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

func (t Target) portOK(port uint16) bool { return t.Port == 0 || t.Port == port }

func (t Target) matchName(name string) bool {
	if t.Prefix.IsValid() {
		return false
	}
	if t.Suffix {
		return matchesSuffix(name, t.Host)
	}
	return name == t.Host
}

// matchesSuffix: name is suffix or one of its subdomains.
func matchesSuffix(name, suffix string) bool {
	return name == suffix || strings.HasSuffix(name, "."+suffix)
}

func canonicalName(s string) string {
	return strings.ToLower(strings.TrimSuffix(s, "."))
}

// checkName accepts a DNS name of letters, digits, hyphens and (between
// labels) dots, labels of 1 to 63 bytes not starting or ending in a hyphen,
// at most 253 bytes. Underscores are allowed, as in real service names.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("no host")
	}
	if len(name) > 253 {
		return fmt.Errorf("a domain is at most 253 characters")
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return fmt.Errorf("empty label in domain")
		}
		if len(label) > 63 {
			return fmt.Errorf("label %q is longer than 63 characters", label)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with a hyphen", label)
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("character %q is not allowed in a domain", c)
			}
		}
	}
	return nil
}

// isNumeric: the last label is all digits, as in 1.2.3 or 300.1.1.1; no
// top-level domain is, and resolvers may read such a name as an address.
func isNumeric(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	return strings.Trim(last, "0123456789") == ""
}
