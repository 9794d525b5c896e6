package local

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"

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
	a := []string{"--dir", "/run", "--dir", guestEgressDir, "--bind", m.Socket, guestSocket}
	if m.Relay != "" {
		a = append(a, "--ro-bind", m.Relay, guestRelay)
	}
	return a
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
	spec.Env = append(spec.Env, proxyEnv(secrets)...)
	// Command is /bin/sh -c MARKER NAME ARGV...: the relay goes first in ARGV.
	spec.Command = slices.Concat(spec.Command[:4], []string{guestRelay, guestSocket, relayAddr, "--"}, spec.Command[4:])
	return e, nil
}

// proxyEnv points a command at the relay, and names each secret's
// placeholder.
func proxyEnv(secrets []egress.SecretValue) []string {
	url := "http://" + relayAddr
	var env []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		env = append(env, k+"="+url)
	}
	env = append(env, "ALL_PROXY=socks5h://"+relayAddr, "all_proxy=socks5h://"+relayAddr)
	for _, s := range secrets {
		env = append(env, s.Env+"="+s.Placeholder)
	}
	return env
}

// Files of a resident sandbox's egress proxy in the session's directory,
// which no guest reaches: the proxy's socket (bound into the sandbox, as
// a call's is) and its refusal log.
const (
	residentEgressSocket = "egress.sock"
	residentRefusals     = "egress-refusals.log"
)

// residentEgress is a resident sandbox's allowlist: a detached proxy (this
// program run as egress.DetachedName), since the sandbox outlives the
// process that starts it, started once the sandbox is; the agent relays
// to it (serve --egress-relay).
type residentEgress struct {
	ln, log *os.File
	config  []byte
}

// prepareResidentEgress makes the proxy's socket and log and points spec
// at them: the socket bound in, the agent relaying, the command's proxy
// variables and secrets' placeholders set.
func prepareResidentEgress(spec *bwrapSpec, root, name string, pol egress.Policy) (*residentEgress, error) {
	secrets, err := secretValues(name, pol.Secrets)
	if err != nil {
		return nil, err
	}
	config, err := json.Marshal(egress.DetachedConfig{Policy: pol, Secrets: secrets})
	if err != nil {
		return nil, err
	}
	ln, err := listenUnix(root, residentEgressSocket, 0o666)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	log, err := os.OpenFile(filepath.Join(root, residentRefusals), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	spec.Egress = &egressMounts{Socket: filepath.Join(root, residentEgressSocket)}
	spec.Env = append(spec.Env, proxyEnv(secrets)...)
	spec.Command = append(spec.Command, "--egress-relay="+relayAddr+"="+guestSocket)
	return &residentEgress{ln: ln, log: log, config: config}, nil
}

// start starts the proxy serving until the process of pidfd sandbox (the
// sandbox's bwrap) ends, its diagnostics to stderr, and closes this
// process's copies of its files.
func (e *residentEgress) start(sandbox, stderr *os.File) (proc, error) {
	defer e.close()
	self, err := os.Executable()
	if err != nil {
		return proc{}, fmt.Errorf("egress proxy: %w", err)
	}
	cmd := &exec.Cmd{
		Path: self, Args: []string{egress.DetachedName}, Stdin: bytes.NewReader(e.config), Stderr: stderr,
		ExtraFiles:  []*os.File{egress.DetachedListenFD - 3: e.ln, egress.DetachedRefusalsFD - 3: e.log, egress.DetachedWatchFD - 3: sandbox},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		return proc{}, fmt.Errorf("egress proxy: %w", err)
	}
	go func() { _ = cmd.Wait() }() // while this process lives, it reaps the proxy
	return procOf(cmd.Process.Pid), nil
}

func (e *residentEgress) close() {
	e.ln.Close()
	e.log.Close()
}

// refusalNotes are the refusals logged in f since offset from, as notes,
// telling refused of each.
func refusalNotes(f *os.File, from int64, refused func(*egress.RefusedError)) []string {
	logged, _, err := egress.ReadRefusals(f, from)
	if err != nil {
		return nil
	}
	var notes egress.Refusals
	for _, e := range logged {
		notes.Add(&e)
		if refused != nil {
			refused(&e)
		}
	}
	return notes.Notes()
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
