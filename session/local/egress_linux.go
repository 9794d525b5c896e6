package local

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/oma-sandbox/oma-sandbox/egress"
)

// Guest side of an allowlist: the relay (this program, run under
// egress.RelayName) listens on relayAddr in the call's own network
// namespace and forwards to the host proxy's socket bound at guestSocket.
const (
	guestEgressDir = "/run/oma-egress"
	guestSocket    = guestEgressDir + "/proxy.sock"
	guestRelay     = guestEgressDir + "/" + egress.RelayName
	relayAddr      = "127.0.0.1:3128"
)

// egressMounts are the host paths bound into a sandbox for its allowlist.
type egressMounts struct {
	Socket string // the proxy's unix socket
	Relay  string // the executable run as the relay
}

func (m *egressMounts) args() []string {
	return []string{"--dir", "/run", "--dir", guestEgressDir,
		"--ro-bind", m.Relay, guestRelay, "--bind", m.Socket, guestSocket}
}

// egressCall is one call's proxy: started before the sandbox, stopped by
// its finish, which reports each refused destination as a note the
// caller sees on the command's stderr.
type egressCall struct {
	dir   string
	l     net.Listener
	proxy *egress.Proxy
	done  chan struct{}

	refused egress.Refusals
}

// startEgress serves pol on a unix socket in a fresh private directory
// and points spec at it: the socket and relay bound in, the relay
// wrapped around the command (after the start marker) and the proxy
// variables set for the command.
func startEgress(spec *bwrapSpec, name string, pol egress.Policy, refused func(*egress.RefusedError)) (*egressCall, error) {
	relay, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("egress relay: %w", err)
	}
	secrets, err := secretValues(name, pol.Secrets)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "oma-egress-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "proxy.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	// The directory (0700) keeps host users out; inside, the sandbox's
	// user must be able to connect.
	if err := os.Chmod(sock, 0o666); err != nil {
		l.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	e := &egressCall{dir: dir, l: l, done: make(chan struct{})}
	e.proxy = &egress.Proxy{Policy: pol, Secrets: secrets, Refused: func(r *egress.RefusedError) {
		e.refused.Add(r)
		if refused != nil {
			refused(r)
		}
	}}
	go func() {
		defer close(e.done)
		_ = e.proxy.Serve(l)
	}()
	spec.Egress = &egressMounts{Socket: sock, Relay: relay}
	url := "http://" + relayAddr
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		spec.Env = append(spec.Env, k+"="+url)
	}
	spec.Env = append(spec.Env, "ALL_PROXY=socks5h://"+relayAddr, "all_proxy=socks5h://"+relayAddr)
	for _, s := range secrets {
		spec.Env = append(spec.Env, s.Env+"="+s.Placeholder)
	}
	// Command is /bin/sh -c MARKER NAME ARGV...: the relay goes first in ARGV.
	spec.Command = slices.Concat(spec.Command[:4], []string{guestRelay, guestSocket, relayAddr, "--"}, spec.Command[4:])
	return e, nil
}

// secretValues reads each secret's value from this process's environment
// and gives it a placeholder, the same for every call of the session, so a
// placeholder a command saved still works in the next call.
func secretValues(name string, secrets []egress.Secret) ([]egress.SecretValue, error) {
	var out []egress.SecretValue
	for _, s := range secrets {
		v, ok := os.LookupEnv(s.Env)
		if !ok {
			return nil, fmt.Errorf("secret variable %s is not set in this process's environment", s.Env)
		}
		sum := sha256.Sum256([]byte(name + "\x00" + s.Env))
		out = append(out, egress.SecretValue{Secret: s, Placeholder: "oma-secret-" + s.Env + "-" + hex.EncodeToString(sum[:8]), Value: v})
	}
	return out, nil
}

// stop ends the proxy and its connections and returns the refusals.
func (e *egressCall) stop() []string {
	e.l.Close()
	e.proxy.Close()
	<-e.done
	os.RemoveAll(e.dir)
	return e.refused.Notes()
}
