//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/egress"
)

// An allowlist is enforced as the local backend enforces it: each exec
// gets a host-side egress.Proxy built from create's rules, on a unix
// socket in a per-sandbox directory bound read-only into the guest at
// guestEgressDir, and runs its command under the relay (this binary, hard
// linked there as egress.RelayName) that listens on a guest loopback
// address and forwards to that socket.
const guestEgressDir = "/run/oma-egress"

// egressPolicy is sb's allowlist as the proxy enforces it, and false when
// fakemsb cannot enforce sb's policy that way: a policy must deny by
// default and consist of allow rules for TCP (or any protocol) to IPs,
// CIDRs, domains or *.suffixes, on every port or one, besides ingress
// rules, which concern forwarded ports only. Such a policy is the
// whole of what oma-sandbox gives msb; any other one that denies by
// default keeps failing closed (no network at all).
func (sb *sandbox) egressPolicy() (egress.Policy, bool) {
	p := sb.NetPolicy
	if sb.Network || p == nil || p.DefaultEgress != "deny" || len(p.Rules) == 0 {
		return egress.Policy{}, false
	}
	pol := egress.Policy{Mode: egress.Allowlist}
	for _, r := range p.Rules {
		if r.Direction == "ingress" {
			continue // it admits forwarded ports only (ports.go)
		}
		if r.Action != "allow" {
			return egress.Policy{}, false
		}
		if len(r.Protocols) > 0 && r.Protocols[0] != "tcp" {
			return egress.Policy{}, false
		}
		var t egress.Target
		switch {
		case r.Destination["cidr"] != nil:
			s, _ := r.Destination["cidr"].(string)
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				return egress.Policy{}, false
			}
			t.Prefix = pfx
		case r.Destination["domain"] != nil:
			t.Host, _ = r.Destination["domain"].(string)
		case r.Destination["domain_suffix"] != nil:
			t.Host, _ = r.Destination["domain_suffix"].(string)
			t.Suffix = true
		default: // groups, any, dns
			return egress.Policy{}, false
		}
		if len(r.Ports) > 0 {
			if r.Ports[0]["start"] != r.Ports[0]["end"] {
				return egress.Policy{}, false
			}
			t.Port = uint16(r.Ports[0]["start"])
		}
		if _, err := egress.ParseTarget(t.String()); err != nil {
			return egress.Policy{}, false
		}
		pol.Allow = append(pol.Allow, t)
	}
	if len(pol.Allow) == 0 {
		return egress.Policy{}, false
	}
	for _, s := range sb.Secrets {
		pol.Secrets = append(pol.Secrets, egress.Secret{Env: s.Env, Hosts: s.Hosts})
	}
	return pol, true
}

// egressDir is the host directory bound at guestEgressDir: the relay and
// the sockets of running execs. Its parent is 0700 so that no other host
// user reaches a socket; the directory itself is 0711 so that the guest's
// user can reach the names it is given but not list them.
func (a *app) egressDir(name string) string { return filepath.Join(a.home, "egress", name) }

// prepareEgress makes sb's egress directory and links the relay into it,
// before its holder starts.
func (a *app) prepareEgress(sb *sandbox) error {
	dir := a.egressDir(sb.Name)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	relay := filepath.Join(dir, egress.RelayName)
	tmp := relay + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Link(exe, tmp); err != nil {
		if err := copyExecutable(exe, tmp); err != nil {
			return err
		}
	}
	return os.Rename(tmp, relay)
}

func copyExecutable(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}

// secretsPath holds the values of a sandbox's secrets, read from create's
// environment (msb reads them when the sandbox starts; oma-sandbox passes
// them to create only): mode 0600 in a 0700 directory the guest never
// sees, removed with the sandbox.
func (a *app) secretsPath(name string) string {
	return filepath.Join(a.home, "secrets", name+".json")
}

// saveSecrets records the value of each of sb's secrets that create's
// environment sets; an unset one has no value, so its placeholder is
// never replaced. Without an allowlist the proxy that would use them
// never runs, so nothing is kept.
func (a *app) saveSecrets(sb *sandbox) error {
	path := a.secretsPath(sb.Name)
	if _, ok := sb.egressPolicy(); !ok || len(sb.Secrets) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	values := map[string]string{}
	for _, s := range sb.Secrets {
		if v, ok := os.LookupEnv(s.Env); ok {
			values[s.Env] = v
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(values)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// secretPlaceholder is what the guest's variable holds, as inspect shows it.
func secretPlaceholder(env string) string { return "$MSB_" + env }

func (a *app) secretValues(name string, secrets []egress.Secret) ([]egress.SecretValue, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	data, err := os.ReadFile(a.secretsPath(name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	values := map[string]string{}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &values); err != nil {
			return nil, fmt.Errorf("%s: %w", a.secretsPath(name), err)
		}
	}
	var out []egress.SecretValue
	for _, s := range secrets {
		if v, ok := values[s.Env]; ok {
			out = append(out, egress.SecretValue{Secret: s, Placeholder: secretPlaceholder(s.Env), Value: v})
		}
	}
	return out, nil
}

// removeEgress removes a sandbox's egress directory and secret values.
func (a *app) removeEgress(name string) {
	_ = os.RemoveAll(a.egressDir(name))
	_ = os.Remove(a.secretsPath(name))
}

// egressExec is one exec's proxy.
type egressExec struct {
	sock  string
	l     net.Listener
	proxy *egress.Proxy
	done  chan struct{}
	log   string

	refused egress.Refusals
}

// startEgress serves sb's policy on a fresh socket in its egress directory
// and returns the env the guest command gets (the proxy variables, each
// secret's placeholder) and the relay's argv to put before the command.
func (a *app) startEgress(sb *sandbox, pol egress.Policy) (*egressExec, []string, []string, error) {
	secrets, err := a.secretValues(sb.Name, pol.Secrets)
	if err != nil {
		return nil, nil, nil, err
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, nil, nil, err
	}
	sockName := "proxy-" + hex.EncodeToString(rnd[:]) + ".sock"
	sock := filepath.Join(a.egressDir(sb.Name), sockName)
	l, err := listenUnix(a.egressDir(sb.Name), sockName)
	if err != nil {
		return nil, nil, nil, err
	}
	// The guest's user must be able to connect; the 0700 parent keeps
	// host users out.
	if err := os.Chmod(sock, 0o666); err != nil {
		l.Close()
		return nil, nil, nil, err
	}
	e := &egressExec{sock: sock, l: l, done: make(chan struct{}), log: filepath.Join(a.runDir(), sb.Name+".egress.log")}
	e.proxy = &egress.Proxy{Policy: pol, Secrets: secrets, Refused: e.refused.Add, Resolve: a.resolver()}
	go func() {
		defer close(e.done)
		_ = e.proxy.Serve(l)
	}()
	// Each exec's relay listens on a loopback address of its own in the
	// sandbox's shared network namespace, so concurrent execs do not
	// collide on one port.
	relayAddr := fmt.Sprintf("127.%d.%d.%d:3128", 1+rnd[0]%254, 1+rnd[1]%254, 1+rnd[2]%254)
	url := "http://" + relayAddr
	var env []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		env = append(env, k+"="+url)
	}
	env = append(env, "ALL_PROXY=socks5h://"+relayAddr, "all_proxy=socks5h://"+relayAddr)
	for _, s := range pol.Secrets {
		env = append(env, s.Env+"="+secretPlaceholder(s.Env))
	}
	relay := []string{guestEgressDir + "/" + egress.RelayName, guestEgressDir + "/" + sockName, relayAddr, "--"}
	return e, env, relay, nil
}

// listenUnix listens on dir/name, reached through a descriptor of dir:
// a socket's path is limited to 107 bytes, which a state directory and a
// sandbox name (up to 128 bytes) can exceed. The caller removes the
// socket: the listener's own path stops naming it once dir is closed.
func listenUnix(dir, name string) (*net.UnixListener, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Net: "unix", Name: fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name)})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false)
	return l, nil
}

// stop ends the proxy and its connections, removes the socket and appends
// the refusals to the sandbox's egress log (run/NAME.egress.log), as msb's
// block-and-log logs secret violations.
func (e *egressExec) stop() {
	e.l.Close()
	e.proxy.Close()
	<-e.done
	_ = os.Remove(e.sock)
	notes := e.refused.Notes()
	if len(notes) == 0 {
		return
	}
	if f, err := os.OpenFile(e.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		_, _ = f.WriteString(strings.Join(notes, "\n") + "\n")
		f.Close()
	}
}

// parseHosts reads FAKEMSB_HOSTS: NAME=IP[,NAME=IP...], a name given
// more than once having each of its addresses.
func parseHosts(v string) (map[string][]netip.Addr, error) {
	table := map[string][]netip.Addr{}
	for entry := range strings.SplitSeq(v, ",") {
		name, ip, ok := strings.Cut(entry, "=")
		a, err := netip.ParseAddr(ip)
		if !ok || err != nil || name == "" {
			return nil, fmt.Errorf("entry %q: want NAME=IP", entry)
		}
		name = strings.ToLower(strings.TrimSuffix(name, "."))
		table[name] = append(table[name], a)
	}
	return table, nil
}

// resolver is the proxy's resolver: with FAKEMSB_HOSTS set, names resolve
// from it only, so tests can give a domain a loopback address without DNS
// or /etc/hosts; unset, nil (the system resolver).
func (a *app) resolver() func(context.Context, string) ([]netip.Addr, error) {
	if a.hosts == nil {
		return nil
	}
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		if addrs := a.hosts[strings.ToLower(strings.TrimSuffix(host, "."))]; len(addrs) > 0 {
			return addrs, nil
		}
		return nil, &net.DNSError{Err: "no such host (FAKEMSB_HOSTS)", Name: host, IsNotFound: true}
	}
}
