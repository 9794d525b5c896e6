//go:build linux

package main

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"strings"
)

// netRule is one parsed --net-rule token, kept in inspect's shape.
type netRule struct {
	Action      string           `json:"action"`
	Destination destination      `json:"destination"`
	Direction   string           `json:"direction"`
	Ports       []map[string]int `json:"ports"`
	Protocols   []string         `json:"protocols"`
}

// secretSpec is one --secret ENV@HOST[,HOST...].
type secretSpec struct {
	Env   string   `json:"env"`
	Hosts []string `json:"hosts"`
}

// destination is a rule's target in inspect's shape: {"cidr": ...},
// {"domain": ...}, {"group": ...}, ..., or the bare string "any".
type destination map[string]any

func (d destination) MarshalJSON() ([]byte, error) {
	if len(d) == 1 && d["any"] == true {
		return []byte(`"any"`), nil
	}
	return json.Marshal(map[string]any(d))
}

func (d *destination) UnmarshalJSON(b []byte) error {
	if string(b) == `"any"` {
		*d = destination{"any": true}
		return nil
	}
	var m map[string]any
	err := json.Unmarshal(b, &m)
	*d = m
	return err
}

var netGroups = map[string]bool{"public": true, "private": true, "loopback": true, "link-local": true, "meta": true, "multicast": true, "host": true}

// parseNetRules reads each comma-separated token of each --net-rule in
// msb 0.6.18's grammar <action>[:<direction>]@<target>[:<proto>[:<ports>]],
// refusing what msb refuses (with shorter messages).
func parseNetRules(values []string) ([]netRule, error) {
	var rules []netRule
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			r, err := parseNetRule(tok)
			if err != nil {
				return nil, err
			}
			rules = append(rules, r)
		}
	}
	return rules, nil
}

func parseNetRule(tok string) (netRule, error) {
	left, right, ok := strings.Cut(tok, "@")
	if !ok {
		return netRule{}, failf("rule token `%s` is missing `@`; expected `<action>[:<direction>]@<target>[:<proto>[:<ports>]]`", tok)
	}
	action, dir, _ := strings.Cut(left, ":")
	r := netRule{Action: action, Direction: "egress", Ports: []map[string]int{}, Protocols: []string{}}
	if action != "allow" && action != "deny" {
		return netRule{}, failf("`%s` is not a recognized action. Expected `allow` or `deny`", action)
	}
	if dir != "" {
		if dir != "egress" && dir != "ingress" && dir != "any" {
			return netRule{}, failf("`%s` is not a recognized direction. Expected `egress`, `ingress`, or `any`", dir)
		}
		r.Direction = dir
	}
	target, rest := right, ""
	if inner, ok := strings.CutPrefix(right, "["); ok {
		in, after, ok := strings.Cut(inner, "]")
		if !ok {
			return netRule{}, failf("`%s` is not a valid target", right)
		}
		target, rest = in, strings.TrimPrefix(after, ":")
		if p, err := netip.ParsePrefix(target); err == nil && p.Addr().Is6() {
			r.Destination = map[string]any{"cidr": p.String()}
		} else if a, err := netip.ParseAddr(target); err == nil && a.Is6() {
			r.Destination = map[string]any{"cidr": netip.PrefixFrom(a, 128).String()}
		} else {
			return netRule{}, failf("`%s` is not a valid target", right)
		}
	} else {
		target, rest, _ = strings.Cut(right, ":")
		d, err := netTarget(target)
		if err != nil {
			return netRule{}, err
		}
		r.Destination = d
	}
	if rest == "" {
		return r, nil
	}
	proto, ports, _ := strings.Cut(rest, ":")
	switch proto {
	case "any":
	case "tcp", "udp", "icmpv4", "icmpv6":
		r.Protocols = []string{proto}
	default:
		return netRule{}, failf("`%s` is not a recognized protocol", proto)
	}
	if ports == "" || ports == "any" {
		return r, nil
	}
	lo, hi, isRange := strings.Cut(ports, "-")
	if !isRange {
		hi = lo
	}
	l, err1 := strconv.ParseUint(lo, 10, 16)
	h, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil || l > h {
		return netRule{}, failf("rule token `%s` has trailing fields after `<ports>`; if this is an IPv6 address, wrap it as `[<addr>]`", tok)
	}
	r.Ports = []map[string]int{{"start": int(l), "end": int(h)}}
	return r, nil
}

func netTarget(t string) (map[string]any, error) {
	switch {
	case t == "any":
		return map[string]any{"any": true}, nil
	case netGroups[t] || t == "dns":
		return map[string]any{"group": t}, nil
	case strings.HasPrefix(t, "*."):
		return map[string]any{"domain_suffix": strings.ToLower(t[2:])}, nil
	case strings.Contains(t, "/"):
		p, err := netip.ParsePrefix(t)
		if err != nil {
			return nil, failf("`%s` is not a valid CIDR", t)
		}
		return map[string]any{"cidr": p.String()}, nil
	}
	if a, err := netip.ParseAddr(t); err == nil {
		return map[string]any{"cidr": netip.PrefixFrom(a, a.BitLen()).String()}, nil
	}
	if t == "" {
		return nil, failf("`` is not a valid target. Expected: any, dns, a group name (public, private, loopback, link-local, meta, multicast, host), an IP, a CIDR, a domain (with dot), domain=<name>, or suffix=<domain>")
	}
	if !strings.Contains(t, ".") {
		return nil, failf("`%s` is ambiguous (looks like a single-label hostname or a typoed keyword). Use `domain=%s` to target a literal hostname", t, t)
	}
	return map[string]any{"domain": strings.ToLower(t)}, nil
}

// parseSecrets reads --secret ENV@HOST[,HOST...]; an inline value is
// refused as msb refuses it.
func parseSecrets(values []string) ([]secretSpec, error) {
	var out []secretSpec
	for _, v := range values {
		env, hosts, ok := strings.Cut(v, "@")
		if k, _, inline := strings.Cut(env, "="); inline {
			return nil, failf("inline secret values (`%s=VALUE@HOST`) are not supported by `create`: the value would be stored in the sandbox config at rest. Export the value as a host environment variable and reference it with `%s@HOST` instead, which is resolved from the environment at start time.", k, k)
		}
		if !ok || env == "" || hosts == "" {
			return nil, failf("invalid secret `%s`: expected ENV@HOST[,HOST...]", v)
		}
		out = append(out, secretSpec{Env: env, Hosts: strings.Split(hosts, ",")})
	}
	return out, nil
}

// networkDoc is config.network as msb 0.6.18 shows the parts fakemsb
// keeps: the policy when a network flag set one, the secrets (by
// reference and placeholder, never by value).
type networkDoc struct {
	Enabled bool          `json:"enabled"`
	Ports   []portMapping `json:"ports,omitempty"`
	Policy  *policyDoc    `json:"policy,omitempty"`
	Secrets *secretsDoc   `json:"secrets,omitempty"`
}

type policyDoc struct {
	DefaultEgress  string    `json:"default_egress"`
	DefaultIngress string    `json:"default_ingress"`
	Rules          []netRule `json:"rules"`
}

type secretsDoc struct {
	OnViolation string      `json:"on_violation"`
	Secrets     []secretDoc `json:"secrets"`
}

type secretDoc struct {
	AllowedHosts []map[string]string `json:"allowed_hosts"`
	EnvVar       string              `json:"env_var"`
	Placeholder  string              `json:"placeholder"`
	Source       map[string]string   `json:"source"`
	Value        string              `json:"value"`
}

func (sb *sandbox) networkDoc() networkDoc {
	d := networkDoc{Enabled: sb.Network, Ports: sb.Ports}
	if sb.NetPolicy != nil {
		p := *sb.NetPolicy
		if p.Rules == nil {
			p.Rules = []netRule{}
		}
		d.Policy = &p
	}
	if len(sb.Secrets) > 0 {
		s := &secretsDoc{OnViolation: sb.OnSecretViolation, Secrets: []secretDoc{}}
		if s.OnViolation == "" {
			s.OnViolation = "block"
		}
		for _, sec := range sb.Secrets {
			doc := secretDoc{EnvVar: sec.Env, Placeholder: "$MSB_" + sec.Env, Source: map[string]string{"kind": "env", "var": sec.Env}}
			for _, h := range sec.Hosts {
				if suffix, ok := strings.CutPrefix(h, "*."); ok {
					doc.AllowedHosts = append(doc.AllowedHosts, map[string]string{"wildcard": "*." + suffix})
				} else {
					doc.AllowedHosts = append(doc.AllowedHosts, map[string]string{"exact": h})
				}
			}
			s.Secrets = append(s.Secrets, doc)
		}
		d.Secrets = s
	}
	return d
}

// setNetwork keeps create's network flags. The policy is shown only when
// rules or a default egress were given (a plain --no-net shows
// enabled: false, as before). fakemsb cannot filter, so it fails closed:
// a guest gets the host's network only when nothing denies by default,
// and an allowlist gets no network at all.
func (sb *sandbox) setNetwork(p *parsed) error {
	rules, err := parseNetRules(p.vals["net-rule"])
	if err != nil {
		return err
	}
	if p.has("no-net") && p.has("net-default-egress") {
		return p.spec.usageError("the argument '--no-net' cannot be used with '--net-default-egress <ACTION>'")
	}
	if err := p.oneOf("net-default-egress", "allow", "deny"); err != nil {
		return err
	}
	if err := p.oneOf("on-secret-violation", "block", "block-and-log", "block-and-terminate", "passthrough"); err != nil {
		return err
	}
	if sb.Secrets, err = parseSecrets(p.vals["secret"]); err != nil {
		return err
	}
	sb.OnSecretViolation = p.str("on-secret-violation")
	egress := p.str("net-default-egress")
	switch {
	case p.has("no-net") && len(rules) > 0:
		sb.NetPolicy = &policyDoc{DefaultEgress: "deny", DefaultIngress: "deny", Rules: rules}
	case egress != "" || len(rules) > 0:
		if egress == "" {
			egress = "deny"
		}
		sb.NetPolicy = &policyDoc{DefaultEgress: egress, DefaultIngress: "allow", Rules: rules}
	}
	sb.Network = !p.has("no-net") && (sb.NetPolicy == nil || sb.NetPolicy.DefaultEgress == "allow")
	return nil
}
