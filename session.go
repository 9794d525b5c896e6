package omasandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
	"github.com/oma-sandbox/oma-sandbox/transfer"
)

// Backends Options.Backend names.
const (
	// BackendAuto picks msb when Doctor finds it usable, else local.
	BackendAuto = "auto"
	// BackendMsb runs each session in its own msb microVM.
	BackendMsb = "msb"
	// BackendLocal runs each command under bubblewrap on this host.
	BackendLocal = "local"
)

// LocalPrefix starts every local session name; msb names start with
// session.DefaultPrefix and end in -sandbox, so a name tells its backend.
const LocalPrefix = "oma-local"

// Policy and Limits shape a local session; see package session/local.
type (
	Policy = local.Policy
	Limits = local.Limits
)

// NetworkPolicy is what a session may reach; see package egress. The zero
// value denies all.
type NetworkPolicy = egress.Policy

// Paths are where a session's directories appear to its commands.
type Paths = session.Paths

// Options configure Open. Zero values take the backends' defaults.
type Options struct {
	// Backend is "auto" (also ""), "msb" or "local".
	Backend string
	// WorkspaceID and SessionID label the session and shape its name.
	// WorkspaceID is required; SessionID "" means a fresh short uuid.
	WorkspaceID string
	SessionID   string

	// Network is what the session may reach, on either backend; the zero
	// value denies all. The local backend enforces the mode, the allowlist
	// and (through its allowlist proxy, plain HTTP only) the secrets:
	// Policy.Network, Policy.Allow and Policy.Secrets are set from it.
	Network NetworkPolicy

	// Msb is the msb binary; "" means $OMA_MSB, else msb on PATH.
	Msb string
	// Image is an msb session's OCI image.
	Image string
	// CPUs and Memory (such as "2G") size a session: an msb session's VM,
	// or a local session's CPU quota (that many CPUs) and memory limit, as
	// Resize sets them; Limits may not give those too.
	CPUs   int
	Memory string
	// IdleTimeout, a duration such as "30m", makes msb stop (pause) an idle
	// msb session by itself; the next call resumes it. msb only: nothing
	// watches a local session between calls to pause it, so Open refuses
	// it there.
	IdleTimeout string
	// Ports forward host ports into an msb session (a preview of a dev
	// server the agent starts), each on 127.0.0.1 unless it names an
	// address. msb only: a local session's sandbox has no network the host
	// can reach (only its egress proxy's way out); Open refuses them there.
	Ports []PortForward
	// NoAutoResume makes a call on a paused session fail with
	// session.ErrPaused instead of resuming it first.
	NoAutoResume bool
	// OneExecPerCall keeps an msb session on one msb exec per call, which
	// runs the guest agent's builtin: Open
	// and Attach open no channel to it. For one-shot users, to whom opening
	// the channel (one msb inspect, one msb exec --stream) costs more than
	// their call; long-lived sessions (the MCP server, a library user's)
	// leave it off. See docs/guest-agent.md.
	OneExecPerCall bool

	// StateDir holds the local backend's sessions; "" means
	// $XDG_STATE_HOME/oma-sandbox/local, else ~/.cache/oma-sandbox/local.
	StateDir string
	// Policy and Limits shape a local session.
	Policy Policy
	Limits Limits

	// UploadLimits bound the bytes Upload places in one call and over the
	// session's life (as opened or attached: a fork starts a count of its
	// own); zero fields take transfer's defaults, 1 GiB and 4 GiB.
	UploadLimits transfer.Limits

	// OperationTimeout bounds every tool call that names no timeout of its
	// own, and is the bash tool's default timeout; 0 means 10 s.
	OperationTimeout time.Duration
	// Logger gets the backends' log and, at Info level, an audit record of
	// every tool call and session action (docs/cli.md#audit-records); nil
	// discards them.
	Logger *slog.Logger
	// TracerProvider gets a span per tool call and session action
	// (docs/operations.md#traces); nil means otel.GetTracerProvider(), a
	// no-op unless the program installed a provider.
	TracerProvider trace.TracerProvider
	// MeterProvider gets the sessions', tool calls' and msb invocations'
	// metrics (docs/operations.md#metrics); nil means
	// otel.GetMeterProvider(), a no-op unless the program installed one.
	MeterProvider metric.MeterProvider
}

func (o Options) doctor() DoctorOptions {
	return DoctorOptions{Msb: o.Msb, Image: o.Image, Logger: o.Logger}
}

func (o Options) logger() *slog.Logger { return o.doctor().logger() }

func (o Options) tracerProvider() trace.TracerProvider {
	if o.TracerProvider == nil {
		return otel.GetTracerProvider()
	}
	return o.TracerProvider
}

func (o Options) client() *msb.Client {
	return msb.NewClient(msb.Observed(&msb.CLI{Path: o.Msb, Logger: o.logger()}, o.tracerProvider(), o.meterProvider()))
}

// Session is one sandbox and the agent tools that run in it. It is safe
// for concurrent use.
type Session struct {
	backend string
	sess    session.Session
	tb      *tools.Toolbox
	opts    Options // as opened or attached; a fork is wrapped with them
	uploads *transfer.Quota
	meters  sessionMeters
	closed  atomic.Bool // Close succeeded: the session is no longer held
}

// PickBackend resolves backend ("auto", "", "msb" or "local") to the one
// Open would use: auto probes msb as Doctor does and falls back to local.
func PickBackend(ctx context.Context, backend string, o DoctorOptions) (string, error) {
	switch backend {
	case BackendAuto, "":
		if usable(msbChecks(ctx, o)) {
			return BackendMsb, nil
		}
		return BackendLocal, nil
	case BackendMsb, BackendLocal:
		return backend, nil
	}
	return "", invalidf("backend %q: want auto, msb or local", backend)
}

// Open creates a session on the backend o names. The session lives until
// Close (or until the reaper removes it). An error wrapping ErrInvalid is
// a refused option, and nothing was created. o.Logger gets an audit record
// of the creation at Info level, o.TracerProvider a span.
func Open(ctx context.Context, o Options) (*Session, error) {
	ctx, a := beginAction(ctx, o, "create")
	s, err := open(ctx, o)
	if s != nil {
		s.endAction(ctx, a, err)
	} else {
		a.end(ctx, err, slog.String("backend", o.Backend))
	}
	return s, err
}

func open(ctx context.Context, o Options) (*Session, error) {
	backend, err := PickBackend(ctx, o.Backend, o.doctor())
	if err != nil {
		return nil, err
	}
	if o.WorkspaceID == "" {
		return nil, invalidf("the workspace id must not be empty")
	}
	if o.CPUs < 0 {
		return nil, invalidf("cpus %d: want a positive number", o.CPUs)
	}
	if o.SessionID == "" {
		o.SessionID = strings.SplitN(uuid.NewString(), "-", 2)[0]
	}
	var s session.Session
	if backend == BackendMsb {
		var ms *microvm.Session
		if ms, err = microvm.Create(ctx, microvm.Options{
			Client: o.client(), WorkspaceID: o.WorkspaceID, SessionID: o.SessionID,
			Image: o.Image, CPUs: o.CPUs, Memory: o.Memory, Network: o.Network,
			IdleTimeout: o.IdleTimeout, NoAutoResume: o.NoAutoResume, Ports: o.Ports,
			OperationTimeout: o.OperationTimeout, Logger: o.logger(), NoChannel: o.OneExecPerCall,
		}); err == nil {
			s = ms
		}
	} else {
		if o.IdleTimeout != "" {
			return nil, invalidf("idle timeout %q: msb sessions only; nothing watches a local session between calls to pause it", o.IdleTimeout)
		}
		if len(o.Ports) > 0 {
			return nil, invalidf("port %s: msb sessions only; a local session's sandbox has no network the host can reach", o.Ports[0])
		}
		if err := o.Network.CheckSet(os.LookupEnv); err != nil {
			return nil, invalidf("%v", err)
		}
		o.Policy.Network, o.Policy.Allow, o.Policy.Secrets = local.Network(o.Network.Effective()), o.Network.Allow, o.Network.Secrets
		if o.CPUs != 0 && o.Limits.CPUQuota != 0 {
			return nil, invalidf("cpus %d and Limits.CPUQuota %s both size the local session: give one", o.CPUs, o.Limits.CPUQuota)
		}
		if o.Memory != "" && o.Limits.MemoryBytes != 0 {
			return nil, invalidf("memory %q and Limits.MemoryBytes %d both size the local session: give one", o.Memory, o.Limits.MemoryBytes)
		}
		if o.Limits, err = o.Limits.Sized(o.CPUs, o.Memory); err != nil {
			return nil, invalidf("%v", err)
		}
		var ls *local.Session
		if ls, err = local.Create(ctx, local.Options{
			StateDir: o.StateDir, NamePrefix: LocalPrefix, WorkspaceID: o.WorkspaceID, SessionID: o.SessionID,
			Policy: o.Policy, Limits: o.Limits, OperationTimeout: o.OperationTimeout, Logger: o.logger(),
		}); err == nil {
			s = ls
		}
	}
	switch {
	case err == nil:
		w := wrap(backend, s, o)
		w.created(ctx)
		return w, nil
	case errors.Is(err, session.ErrInvalid):
		return nil, err
	}
	return nil, fmt.Errorf("create %s session: %w", backend, err)
}

// Attach opens an existing session by its Name, in this process or another.
// The backend follows from the name; of o, only Msb, StateDir,
// NoAutoResume, OneExecPerCall, OperationTimeout, Logger and
// TracerProvider apply. On msb this runs nothing, so a sandbox that does
// not exist shows at the first call (ErrNotFound); on the local backend
// Attach probes the host again and reads the session's record. o.Logger
// gets an audit record of the attach at Info level, o.TracerProvider a span.
func Attach(ctx context.Context, name string, o Options) (*Session, error) {
	ctx, a := beginAction(ctx, o, "attach")
	s, err := attach(ctx, name, o)
	a.end(ctx, err, slog.String("session", name), slog.String("backend", BackendOf(name)))
	return s, err
}

func attach(ctx context.Context, name string, o Options) (*Session, error) {
	switch BackendOf(name) {
	case BackendMsb:
		s, err := microvm.Attach(o.client(), session.DefaultPrefix, name)
		if err != nil {
			return nil, err
		}
		if o.OneExecPerCall {
			s.DisableAgentChannel()
		}
		return wrap(BackendMsb, s, o), nil
	case BackendLocal:
		s, err := local.Attach(ctx, o.StateDir, name)
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", name, err)
		}
		return wrap(BackendLocal, s, o), nil
	}
	return nil, invalidf("%q is not a session name: msb sessions are named %s-…-sandbox, local ones %s-…", name, session.DefaultPrefix, LocalPrefix)
}

// BackendOf tells a session name's backend, or "" when it is neither's.
func BackendOf(name string) string {
	if _, ok := session.SandboxStem(session.DefaultPrefix, name); ok {
		return BackendMsb
	}
	if strings.HasPrefix(name, LocalPrefix+"-") {
		return BackendLocal
	}
	return ""
}

func wrap(backend string, s session.Session, o Options) *Session {
	w := &Session{backend: backend, sess: s, opts: o, uploads: &transfer.Quota{Limits: o.UploadLimits}, meters: o.sessionMeters(),
		tb: tools.New(s, tools.Options{OperationTimeout: o.OperationTimeout, Logger: o.logger(),
			TracerProvider: o.TracerProvider, MeterProvider: o.MeterProvider, Backend: backend})}
	if m, ok := s.(measured); ok {
		m.Measure(o.meterProvider())
	}
	if r, ok := s.(autoResumer); ok {
		r.SetAutoResume(!o.NoAutoResume)
	}
	w.held(context.Background(), 1)
	return w
}

// autoResumer is a backend session whose calls may resume it when paused.
type autoResumer interface{ SetAutoResume(on bool) }

// measured is a backend session that records its own metrics (its
// agent channel's events and how its calls ran).
type measured interface{ Measure(metric.MeterProvider) }

// Name identifies the session for Attach.
func (s *Session) Name() string { return s.sess.Name() }

// Backend is "msb" or "local".
func (s *Session) Backend() string { return s.backend }

// Paths are the session's directories as its commands see them.
func (s *Session) Paths() Paths { return s.sess.Paths() }

// Sandbox is the backend session underneath, for the packages that take a
// session.Session (transfer, mcpserver).
func (s *Session) Sandbox() session.Session { return s.sess }

// Close removes the sandbox and its workspace. It is idempotent.
func (s *Session) Close(ctx context.Context) error {
	ctx, a := s.beginAction(ctx, "close")
	err := s.sess.Close(ctx)
	s.endAction(ctx, a, err)
	if err == nil && s.closed.CompareAndSwap(false, true) {
		s.held(ctx, -1)
	}
	return err
}
