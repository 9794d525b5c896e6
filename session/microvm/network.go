package microvm

import (
	"strconv"

	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/msb"
)

// applyNetwork maps a session's network policy onto `msb create`: deny is
// --no-net; unrestricted is msb's default (public addresses only: msb
// keeps private, loopback, host and metadata addresses out unless a rule
// allows them); an allowlist is --no-net plus one allow rule per target,
// which msb documents as its allowlist (ingress denied too). Secrets go to
// msb's own injection, which sends the value only to their hosts and logs
// a violation.
func applyNetwork(p egress.Policy, o *msb.CreateOptions) error {
	if err := p.Validate(); err != nil {
		return err
	}
	switch p.Effective() {
	case egress.Deny:
		o.NoNet = true
	case egress.Allowlist:
		o.NoNet = true
		for _, t := range p.Allow {
			o.NetRules = append(o.NetRules, netRules(t)...)
		}
	}
	for _, s := range p.Secrets {
		o.Secrets = append(o.Secrets, msb.SecretRef{Env: s.Env, Hosts: s.Hosts})
	}
	if len(p.Secrets) > 0 {
		o.OnSecretViolation = "block-and-log"
	}
	return nil
}

// HostAlias is the name msb gives a guest for its host: a connection to it
// (msb's gateway address) reaches the host's loopback. Allowing it, with a
// port, lets a session reach a service the host serves on 127.0.0.1.
const HostAlias = "host.microsandbox.internal"

// netRules are the msb rules of one allowed target. HostAlias is msb's
// "host" group (the gateway address msb rewrites to the host's loopback)
// and the name itself, so that the guest's lookup of it is answered; msb
// answers that lookup itself and sends it nowhere.
func netRules(t egress.Target) []msb.NetRule {
	if !t.Suffix && t.Host == HostAlias {
		group := netRule(t)
		group.Target = "host"
		return []msb.NetRule{group, {Action: "allow", Target: HostAlias}}
	}
	return []msb.NetRule{netRule(t)}
}

// netRule is the msb rule of one allowed target: a port means TCP to it.
func netRule(t egress.Target) msb.NetRule {
	r := msb.NetRule{Action: "allow"}
	switch {
	case t.Prefix.IsValid():
		r.Target = t.Prefix.String()
		if t.Prefix.IsSingleIP() {
			r.Target = t.Prefix.Addr().String()
		}
		if t.Prefix.Addr().Is6() {
			r.Target = "[" + r.Target + "]"
		}
	case t.Suffix:
		r.Target = "*." + t.Host
	default:
		r.Target = t.Host
	}
	if t.Port != 0 {
		r.Protocol, r.Ports = "tcp", strconv.Itoa(int(t.Port))
	}
	return r
}

// applyPorts adds the forwards to `msb create`. msb passes a forwarded
// connection through the ingress policy, which --no-net (a denied or
// allowlisted network) sets to deny: each forwarded guest port then gets
// an ingress allow rule, which opens that port to the forward and
// nothing else (the guest's own traffic stays as Network says).
func applyPorts(ports []msb.PortForward, o *msb.CreateOptions) {
	o.Ports = ports
	if !o.NoNet {
		return
	}
	seen := map[string]bool{}
	for _, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = "tcp"
		}
		r := msb.NetRule{Action: "allow", Direction: "ingress", Target: "any", Protocol: proto, Ports: strconv.Itoa(p.Guest)}
		if key := proto + "/" + r.Ports; !seen[key] {
			seen[key] = true
			o.NetRules = append(o.NetRules, r)
		}
	}
}
