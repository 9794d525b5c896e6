package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// Backends.
const (
	backendMsb   = omasandbox.BackendMsb
	backendLocal = omasandbox.BackendLocal
	backendAuto  = omasandbox.BackendAuto
	backendAll   = "all"
)

// closeTimeout bounds removing a session when the command ends.
const closeTimeout = 30 * time.Second

// createFlags are the flags that shape a new session (session create, run, mcp).
type createFlags struct {
	backend     string
	workspaceID string
	sessionID   string
	image       string
	cpus        int
	memory      string
	idleTimeout string
	mode        string
	network     string
	allowNet    stringList
	secrets     stringList
	limits      stringList
	ports       stringList
	dangerous   bool
}

// stringList collects a repeated flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

var (
	msbOnlyFlags   = []string{"image", "idle-timeout", "port"}
	localOnlyFlags = []string{"mode", "limit", "allow-dangerous"}
	// sizeFlags size a session of either backend.
	sizeFlags = []string{"cpus", "memory"}
)

func (f *createFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.backend, "backend", backendAuto, "`backend`: auto (msb when doctor finds it usable, else local), msb or local")
	fs.StringVar(&f.workspaceID, "workspace-id", "cli", "workspace `id` (labels and name)")
	fs.StringVar(&f.sessionID, "session-id", "", "session `id` (default a fresh short uuid)")
	fs.StringVar(&f.image, "image", "", "msb: OCI image `ref` (default "+microvm.DefaultImage+")")
	fs.IntVar(&f.cpus, "cpus", 0, fmt.Sprintf("virtual CPUs (msb: default %d; local: a CPU quota of that many CPUs, default none)", microvm.DefaultCPUs))
	fs.StringVar(&f.memory, "memory", "", "memory `size` such as 512M or 2G (msb: the guest's, default "+microvm.DefaultMemory+"; local: the session's memory limit, default none)")
	fs.StringVar(&f.idleTimeout, "idle-timeout", "", "msb: stop (pause) the session after this `duration` without activity, such as 30m; the next call resumes it (default never)")
	fs.Var(&f.ports, "port", "msb: forward the host's `[ADDR:]HOST:GUEST[/udp]` to the guest's port GUEST, on 127.0.0.1 unless ADDR is given (IPv6 in brackets); repeatable")
	fs.StringVar(&f.mode, "mode", "", "local: filesystem `mode`: workspace-write (default), read-only or danger-full-access")
	fs.StringVar(&f.network, "network", "", "`network`: deny (default), unrestricted, or allowlist (implied by --allow-net)")
	fs.Var(&f.allowNet, "allow-net", "let the session reach `TARGET`: example.com, *.example.com, an IP, a CIDR, [IPv6], each with an optional :PORT; repeatable")
	fs.Var(&f.secrets, "secret", "`ENV@HOST[,HOST...]`: the host variable ENV's value, which the session sees as a placeholder and can send to HOSTs only; repeatable")
	fs.Var(&f.limits, "limit", "local: per-command limit `KEY=VALUE`, repeatable: wall-time, output, memory, processes, cpu, file-size")
	fs.BoolVar(&f.dangerous, "allow-dangerous", false, "local: required with --mode danger-full-access")
}

// pendingSession is a validated create request.
type pendingSession struct {
	backend string
	opts    omasandbox.Options
}

// resolve validates the flags and picks the backend; nothing is created.
// set holds the names of the flags given on the command line.
func (c *cli) resolve(ctx context.Context, f *createFlags, set map[string]bool) (*pendingSession, error) {
	if f.backend == "" {
		return nil, &usageError{msg: fmt.Sprintf("--backend %q: want auto, msb or local", f.backend)}
	}
	backend, err := omasandbox.PickBackend(ctx, f.backend, omasandbox.DoctorOptions{Msb: c.msbPath, Image: f.image, Logger: c.logger})
	if err != nil {
		return nil, &usageError{msg: "--" + err.Error()}
	}
	p := &pendingSession{backend: backend}
	foreign := localOnlyFlags
	if p.backend == backendLocal {
		foreign = msbOnlyFlags
	}
	for _, name := range foreign {
		if set[name] {
			how := "was given"
			if f.backend == backendAuto {
				how = "was picked by --backend auto"
			}
			return nil, &usageError{msg: fmt.Sprintf("--%s does not apply to the %s backend, which %s (msb takes --image, --idle-timeout, --port; local takes --mode, --limit)", name, p.backend, how)}
		}
	}
	if f.workspaceID == "" {
		return nil, &usageError{msg: "--workspace-id must not be empty"}
	}
	if f.cpus < 0 {
		return nil, &usageError{msg: fmt.Sprintf("--cpus %d: want a positive number", f.cpus)}
	}
	network, err := f.networkPolicy()
	if err != nil {
		return nil, err
	}
	p.opts = omasandbox.Options{
		Backend: p.backend, WorkspaceID: f.workspaceID, SessionID: f.sessionID, Network: network,
		Msb: c.msbPath, StateDir: c.stateDir, Logger: c.logger,
	}
	if p.backend == backendMsb {
		p.opts.Image, p.opts.CPUs, p.opts.Memory, p.opts.IdleTimeout = f.image, f.cpus, f.memory, f.idleTimeout
		for _, spec := range f.ports {
			fw, err := msb.ParsePortForward(spec)
			if err != nil {
				return nil, &usageError{msg: "--port: " + err.Error()}
			}
			p.opts.Ports = append(p.opts.Ports, fw)
		}
		return p, nil
	}
	pol := local.Policy{AllowDangerous: f.dangerous}
	if f.mode != "" {
		m, err := local.ParseMode(f.mode)
		if err != nil {
			return nil, &usageError{msg: "--mode: " + err.Error()}
		}
		pol.Mode = m
	}
	if pol.Mode != local.ModeDangerFullAccess && f.dangerous {
		return nil, &usageError{msg: "--allow-dangerous goes with --mode danger-full-access only"}
	}
	if pol.Mode == local.ModeDangerFullAccess && !f.dangerous {
		return nil, &usageError{msg: "--mode danger-full-access shares the host's filesystem and network; confirm it with --allow-dangerous"}
	}
	pol.Network, pol.Allow, pol.Secrets = local.Network(network.Effective()), network.Allow, network.Secrets
	lim, err := local.ParseLimits(f.limits...)
	if err != nil {
		return nil, &usageError{msg: "--limit: " + err.Error()}
	}
	for _, size := range []struct {
		flag, limit string
		limited     bool
	}{{"cpus", "cpu", lim.CPUQuota != 0}, {"memory", "memory", lim.MemoryBytes != 0}} {
		if set[size.flag] && size.limited {
			return nil, &usageError{msg: fmt.Sprintf("--%s and --limit %s= both size the local session: give one", size.flag, size.limit)}
		}
	}
	if lim, err = lim.Sized(f.cpus, f.memory); err != nil {
		return nil, &usageError{msg: "--" + err.Error()}
	}
	p.opts.Policy, p.opts.Limits = pol, lim
	return p, nil
}

// networkPolicy parses --network, --allow-net and --secret into one
// policy, refusing a bad token or an unset secret variable by name.
func (f *createFlags) networkPolicy() (egress.Policy, error) {
	var p egress.Policy
	if f.network != "" {
		m, err := egress.ParseMode(f.network)
		if err != nil {
			return p, &usageError{msg: "--network: " + err.Error()}
		}
		p.Mode = m
	}
	for _, a := range f.allowNet {
		t, err := egress.ParseTarget(a)
		if err != nil {
			return p, &usageError{msg: "--allow-net: " + err.Error()}
		}
		p.Allow = append(p.Allow, t)
	}
	for _, s := range f.secrets {
		sec, err := egress.ParseSecret(s)
		if err != nil {
			return p, &usageError{msg: "--secret: " + err.Error()}
		}
		p.Secrets = append(p.Secrets, sec)
	}
	if err := p.Validate(); err != nil {
		flag := "--network"
		var pe *egress.Error
		if errors.As(err, &pe) && pe.Field == "secret" {
			flag = "--secret"
		}
		return p, &usageError{msg: flag + ": " + err.Error()}
	}
	if err := p.CheckSet(os.LookupEnv); err != nil {
		return p, &usageError{msg: "--secret: " + err.Error()}
	}
	return p, nil
}

// create makes the session, with a spinner on a terminal. A refused option
// is a usage error; nothing was created then.
func (c *cli) create(ctx context.Context, p *pendingSession) (*omasandbox.Session, error) {
	stop := c.spinner("creating " + p.backend + " session")
	s, err := omasandbox.Open(ctx, p.opts)
	stop()
	switch {
	case err == nil:
		return s, nil
	case interrupted(ctx) != nil:
		return nil, interrupted(ctx)
	case errors.Is(err, session.ErrInvalid):
		return nil, &usageError{msg: err.Error()}
	}
	return nil, err
}

// backendOf tells a session name's backend, or "" when it is neither's.
func backendOf(name string) string { return omasandbox.BackendOf(name) }

// open attaches to a session by name for one command, which makes one
// msb exec per guest call: opening the guest agent's channel would cost
// more (mcp, which serves many calls, attaches without OneExecPerCall). On
// msb this runs nothing; on the local backend it probes the host again, as
// every local Attach does.
func (c *cli) open(ctx context.Context, name string) (*omasandbox.Session, error) {
	return c.attachSession(ctx, name, omasandbox.Options{OneExecPerCall: true})
}

// attachSession attaches to session name with the global flags' msb,
// state directory and logger. A name of neither backend is a usage error:
// it was refused before anything ran.
func (c *cli) attachSession(ctx context.Context, name string, opts omasandbox.Options) (*omasandbox.Session, error) {
	opts.Msb, opts.StateDir, opts.Logger = c.msbPath, c.stateDir, c.logger
	s, err := omasandbox.Attach(ctx, name, opts)
	if errors.Is(err, session.ErrInvalid) {
		return nil, &usageError{msg: err.Error()}
	}
	return s, err
}

// closeSession removes a session after its command is done, even when ctx
// was cancelled by a signal.
func closeSession(ctx context.Context, s *omasandbox.Session) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	return s.Close(ctx)
}

// setFlags names the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}
