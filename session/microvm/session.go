package microvm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// Defaults of a session on msb (the seed's, but memory 1G and --root-disk).
const (
	DefaultImage          = "ghcr.io/oma-sandbox/sandbox:latest"
	DefaultCPUs           = 1
	DefaultMemory         = "1G"
	DefaultRootDisk       = "1G"
	DefaultMaxDuration    = "2h"
	DefaultSecurity       = "restricted"
	DefaultPull           = "if-missing"
	DefaultStartupTimeout = 5 * time.Minute

	uploadsTmpfsSize = "64M"
	outputsTmpfsSize = "100M"
)

// Guest paths of every msb session.
var msbPaths = session.Paths{
	Workspace: "/workspace",
	Uploads:   "/mnt/session/uploads",
	Outputs:   "/mnt/session/outputs",
	Skills:    "/workspace/skills",
}

// Options configure Create. Zero values take the defaults above.
type Options struct {
	Client      *msb.Client
	WorkspaceID string
	SessionID   string
	Image       string
	CPUs        int
	Memory      string
	RootDisk    string
	MaxDuration string
	Security    string
	Pull        string
	Prefix      string
	// IdleTimeout, a duration such as "30m", makes msb stop (pause) the
	// sandbox after that long without activity; "" never does.
	IdleTimeout string
	// NoAutoResume makes a call on a paused session fail with ErrPaused
	// instead of resuming it first.
	NoAutoResume bool
	// AgentFile is the guest agent (a linux oma-guest-agent for the guest's
	// architecture) Create places in the sandbox; "" means the one bundled
	// at build time, else this program itself when it is a static Linux
	// build for the guest's architecture; without either Create fails with
	// session.ErrNoAgent. The agent runs every tool call, over one
	// long-lived channel (see docs/guest-agent.md).
	AgentFile string
	// NoChannel sends every call by an msb exec of its own (the agent's
	// builtin, run by that exec) instead of over the agent's channel:
	// cheaper for a session that makes one call or two.
	NoChannel bool
	// Network is what the sandbox may reach; the zero value denies all.
	Network egress.Policy
	// Ports forward host ports to the guest (msb --port), each on
	// 127.0.0.1 unless it names an address. A forwarded guest port is
	// reachable whatever Network says of the guest's own traffic.
	Ports []msb.PortForward
	// OperationTimeout bounds every guest command that names no timeout of
	// its own; StartupTimeout bounds `msb create` (an image pull can be slow).
	OperationTimeout time.Duration
	StartupTimeout   time.Duration
	// Now and Random make names and the created-at label reproducible in tests.
	Now    func() time.Time
	Random func() uint64
	Logger *slog.Logger

	// parent is the sandbox a fork is made from (its LabelParent).
	parent string
	// conf is an msb --conf file naming the root filesystem in place of
	// Image: the snapshot a fork boots from, which holds the guest agent
	// its source had.
	conf string
}

func (o *Options) setDefaults() {
	if o.Client == nil {
		o.Client = msb.NewClient(&msb.CLI{})
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.CPUs == 0 {
		o.CPUs = DefaultCPUs
	}
	if o.Memory == "" {
		o.Memory = DefaultMemory
	}
	if o.RootDisk == "" {
		o.RootDisk = DefaultRootDisk
	}
	if o.MaxDuration == "" {
		o.MaxDuration = DefaultMaxDuration
	}
	if o.Security == "" {
		o.Security = DefaultSecurity
	}
	if o.Pull == "" {
		o.Pull = DefaultPull
	}
	if o.Prefix == "" {
		o.Prefix = session.DefaultPrefix
	}
	if o.OperationTimeout <= 0 {
		o.OperationTimeout = session.DefaultOperationTimeout
	}
	if o.StartupTimeout <= 0 {
		o.StartupTimeout = DefaultStartupTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Random == nil {
		o.Random = randomUint64
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func randomUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return binary.LittleEndian.Uint64(b[:])
}

// Session is a Session backed by one msb sandbox and its workspace volume.
type Session struct {
	client    *msb.Client
	names     session.Names
	opTimeout time.Duration
	logger    *slog.Logger

	mu             sync.Mutex
	closed         bool
	poisonCause    error // why the session was poisoned; nil while it is not
	sandboxStopped bool
	sandboxRemoved bool
	volumeRemoved  bool

	life   lifecycle     // paused or running; see lifecycle.go
	ch     channel       // the guest agent's channel; see channel.go
	served servedCounter // how calls reached the guest; see served.go

	agentFile   string           // Options.AgentFile, the agent an older one is replaced with
	replacement agentReplacement // see agentreplace.go
}

var _ session.Session = (*Session)(nil)

// createOptions are the `msb create` flags of a session.
func createOptions(o Options, names session.Names) (msb.CreateOptions, error) {
	now := o.Now().UTC()
	c := msb.CreateOptions{
		Image:  o.Image,
		Name:   names.Sandbox,
		Mounts: []msb.NamedMount{{Volume: names.Volume, Guest: msbPaths.Workspace}},
		Tmpfs: []msb.Tmpfs{
			{Path: msbPaths.Uploads, Size: uploadsTmpfsSize, Options: []string{"nosuid", "nodev", "noexec"}},
			{Path: msbPaths.Outputs, Size: outputsTmpfsSize, Options: []string{"nosuid", "nodev", "noexec"}},
		},
		Workdir:     msbPaths.Workspace,
		CPUs:        o.CPUs,
		Memory:      o.Memory,
		RootDisk:    o.RootDisk,
		MaxDuration: o.MaxDuration,
		IdleTimeout: o.IdleTimeout,
		Security:    o.Security,
		Pull:        o.Pull,
		Quiet:       true,
		Labels: append(session.OwnerLabels(),
			msb.Label{Key: session.LabelWorkspaceID, Value: o.WorkspaceID},
			msb.Label{Key: session.LabelSessionID, Value: o.SessionID},
			msb.Label{Key: session.LabelCreatedAt, Value: now.Format("2006-01-02T15:04:05.000Z")},
		),
	}
	if o.parent != "" {
		c.Labels = append(c.Labels, msb.Label{Key: session.LabelParent, Value: o.parent})
	}
	if o.conf != "" {
		// The snapshot's root disk is the fork's: the real msb refuses
		// --root-disk beside it ("root_disk() requires an OCI ...").
		c.Image, c.Conf, c.RootDisk = "", o.conf, ""
	}
	if o.conf != "" {
		c.Labels = append(c.Labels, msb.Label{Key: session.LabelAgent, Value: session.AgentInherited})
	}
	if err := applyNetwork(o.Network, &c); err != nil {
		return c, err
	}
	applyPorts(o.Ports, &c)
	return c, nil
}

// Create makes a sandbox with its workspace volume and prepares it: two msb
// invocations (create with --mount-named, which makes the volume; one exec
// that prepares the mounts and runs the ripgrep preflight). Any failure
// removes what was made and returns the original error.
func Create(ctx context.Context, o Options) (*Session, error) {
	o.setDefaults()
	if o.WorkspaceID == "" || o.SessionID == "" {
		return nil, fmt.Errorf("%w: workspace id and session id are required", session.ErrInvalid)
	}
	if err := session.CheckPrefix(o.Prefix); err != nil {
		return nil, fmt.Errorf("%w: %w", session.ErrInvalid, err)
	}
	names := session.NewNames(o.Prefix, o.WorkspaceID, o.SessionID, o.Now(), o.Random())
	createOpts, err := createOptions(o, names)
	if err == nil {
		_, err = createOpts.Args()
	}
	if err == nil {
		err = o.Network.CheckSet(os.LookupEnv) // msb reads them when the sandbox starts
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", session.ErrInvalid, err)
	}
	s := &Session{client: o.Client, names: names, opTimeout: o.OperationTimeout, logger: o.Logger, agentFile: o.AgentFile}
	// The agent this create places is this program's own; a fork's disk
	// holds its source's, which may be older.
	s.replacement.tried = o.conf == ""
	s.life.state = stateRunning
	s.SetAutoResume(!o.NoAutoResume)
	if err := s.placeAgent(o, &createOpts); err != nil {
		return nil, fmt.Errorf("create session %s: %w", names.Sandbox, err)
	}

	startCtx, cancel := context.WithTimeout(ctx, o.StartupTimeout)
	err = o.Client.Create(startCtx, createOpts)
	cancel()
	if err == nil {
		err = s.prepare(ctx)
	}
	if err != nil {
		if cleanupErr := s.cleanupFailedCreate(context.WithoutCancel(ctx)); cleanupErr != nil {
			err = errors.Join(err, cleanupErr)
		}
		s.closed = true
		return nil, fmt.Errorf("create session %s: %w", names.Sandbox, err)
	}
	o.Logger.Debug("session created", "sandbox", names.Sandbox, "volume", names.Volume)
	return s, nil
}

// placeAgent adds the guest agent to the create, from a private cached
// copy, and arms the channel. The agent runs every tool call: without one
// (a build that has none and cannot serve as its own, an unusable cache)
// there is no session, and the error says how to get one.
func (s *Session) placeAgent(o Options, c *msb.CreateOptions) error {
	// msb refuses --copy-file with a snapshot (a --conf root filesystem):
	// a fork has the agent its root disk inherited (Fork checked it has).
	if o.conf == "" {
		path, err := agentPath(o)
		if err != nil {
			return err
		}
		c.CopyFiles = append(c.CopyFiles, msb.CopyFile{Src: path, Dst: agentGuestPath})
	}
	if o.NoChannel {
		s.ch.mode = channelOff
		return nil
	}
	s.armChannel(o)
	return nil
}

// armChannel opens the channel on the first call.
func (s *Session) armChannel(o Options) {
	s.ch.mode = channelClosed
	if o.IdleTimeout != "" {
		if d, err := msb.ParseDuration(o.IdleTimeout); err == nil {
			s.ch.quietFor = d / 2
		}
	}
}

// DisableAgentChannel makes every later call use its own msb exec, and
// closes the channel if one is open. For one-shot users (the CLI's tool
// command), whose single call costs less than opening a channel.
func (s *Session) DisableAgentChannel() { s.closeChannel(true) }

// cleanupFailedCreate removes what a failed create made. The caller gets
// no session to Close, so a removal that fails is tried once more (only
// what failed: a busy volume or a slow msb usually gives way) before the
// rest is left to the reaper.
func (s *Session) cleanupFailedCreate(ctx context.Context) error {
	err := s.remove(ctx)
	if err == nil {
		return nil
	}
	s.logger.Warn("cleanup after failed create, retrying", "sandbox", s.names.Sandbox, "err", err)
	if err = s.remove(ctx); err != nil {
		s.logger.Warn("cleanup after failed create", "sandbox", s.names.Sandbox, "volume", s.names.Volume, "err", err)
	}
	return err
}

// prepare sets the mount owners and modes (the image's agent user is
// 65534: it owns the workspace and the outputs), then runs the ripgrep
// preflight in the workspace: one guest round trip, the agent's prepare
// builtin.
func (s *Session) prepare(ctx context.Context) error {
	cmd := session.Command{Builtin: agentwire.BuiltinPrepare, Args: []string{msbPaths.Uploads, msbPaths.Outputs, msbPaths.Workspace}}
	res, err := s.execBuiltin(ctx, cmd, session.ShellOptions{User: "0", GuestTimeout: s.opTimeout})
	if err != nil {
		return fmt.Errorf("prepare mounts and ripgrep preflight: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%w: prepare mounts and ripgrep preflight: exit %d: %s", session.ErrCannotStart, res.ExitCode, tail(res.Stderr))
	}
	return nil
}

// Attach reopens a session by its sandbox name without any msb invocation;
// the volume follows from the shared stem. A name that is not ours is
// refused; a sandbox that no longer exists surfaces as ErrGone on first use,
// and one that is stopped (as Poison left it, in another process) as
// ErrPoisoned (see stoppedError).
func Attach(client *msb.Client, prefix, sandbox string) (*Session, error) {
	if err := session.CheckPrefix(prefix); err != nil {
		return nil, fmt.Errorf("%w: %w", session.ErrInvalid, err)
	}
	if prefix == "" {
		prefix = session.DefaultPrefix
	}
	stem, ok := session.SandboxStem(prefix, sandbox)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a session sandbox name with prefix %q", session.ErrInvalid, sandbox, prefix)
	}
	if client == nil {
		client = msb.NewClient(&msb.CLI{})
	}
	return &Session{
		client:    client,
		names:     session.NamesFromStem(stem),
		opTimeout: session.DefaultOperationTimeout,
		logger:    slog.New(slog.DiscardHandler),
	}, nil
}

// Name is the sandbox name.
func (s *Session) Name() string { return s.names.Sandbox }

// OperationTimeout bounds every guest command that names no timeout of its
// own (Options.OperationTimeout); tools.New takes it as the tools' default.
func (s *Session) OperationTimeout() time.Duration { return s.opTimeout }

// Names are the session's msb resources.
func (s *Session) Names() session.Names { return s.names }

// Paths are the guest paths.
func (s *Session) Paths() session.Paths { return msbPaths }

// Poisoned reports whether the session's state became unknown.
func (s *Session) Poisoned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.poisonCause != nil
}

func (s *Session) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.poisonCause != nil:
		return s.poisonedError()
	case s.closed:
		return session.ErrClosed
	}
	return nil
}

// Shell runs a bash script in the sandbox (after one msb start when the
// session is paused, see enter): a call on the guest agent's channel when
// the sandbox has the agent (the first call opens it: one msb inspect and
// one msb exec --stream), else one msb exec.
func (s *Session) Shell(ctx context.Context, cmd session.Command, opts session.ShellOptions) (*session.Result, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	release, err := s.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if conn := s.channelConn(ctx); conn != nil {
		return s.runChannel(ctx, conn, cmd, opts)
	}
	return s.exec(ctx, cmd, opts)
}

// execArgv runs argv by one msb exec, under the call's options.
func (s *Session) execArgv(ctx context.Context, argv []string, opts session.ShellOptions) (*session.Result, error) {
	hostTimeout := s.opTimeout + session.HostGrace
	execOpts := msb.ExecOptions{
		Name:    s.names.Sandbox,
		Argv:    argv,
		Stream:  opts.Stdout != nil || opts.Stderr != nil,
		User:    opts.User,
		Workdir: opts.Workdir,
	}
	if execOpts.Workdir == "" {
		execOpts.Workdir = msbPaths.Workspace
	}
	if opts.GuestTimeout > 0 {
		execOpts.Timeout = msb.FormatDuration(opts.GuestTimeout)
		hostTimeout = opts.GuestTimeout + session.HostGrace
	}
	ctx, cancel := context.WithTimeout(ctx, hostTimeout)
	defer cancel()
	res, err := s.client.Exec(ctx, execOpts, msb.Streams{
		Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, MaxOutput: opts.MaxOutput,
	})
	if stopped := s.stoppedError(context.WithoutCancel(ctx), err); stopped != nil {
		return nil, stopped
	}
	return shellResult(res, err)
}

// stoppedError tells whether err is msb failing to start the session's
// sandbox for an exec or a copy, and then whether the sandbox is stopped.
// A session's sandbox runs from its create to its removal unless something
// stopped it: Poison (perhaps in another process, which attached later),
// its max duration or a host restart. msb's exec and copy start a stopped
// sandbox again, and where that fails they answer with msb's own
// `failed to start "NAME"` (a guest's exit 1, for exec). A stopped or
// crashed sandbox marks the session poisoned instead, and the error names
// the kept volume and how to remove it. The guest can print that message
// too, so one msb inspect confirms it; nil means err stands as it is.
func (s *Session) stoppedError(ctx context.Context, err error) error {
	var exitErr *msb.ExitError
	if !errors.As(err, &exitErr) || !strings.HasPrefix(exitErr.Message, `failed to start "`+s.names.Sandbox+`"`) {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, s.opTimeout)
	info, inspectErr := s.client.Inspect(ictx, s.names.Sandbox)
	cancel()
	if inspectErr != nil || !msb.Stopped(info.Status) {
		return nil
	}
	s.closeChannel(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.poisonCause == nil {
		s.poisonCause = fmt.Errorf("sandbox found %s (poisoned by an earlier call, or stopped by its max duration or a host restart); msb: %s", info.Status, exitErr.Message)
	}
	if !s.sandboxRemoved {
		s.sandboxStopped = true
	}
	return s.poisonedError()
}

// shellResult maps msb's outcome onto the Session contract: a guest's own
// exit code is a result; everything that kept it from running is an error.
func shellResult(res *msb.Result, err error) (*session.Result, error) {
	var out *session.Result
	if res != nil {
		out = &session.Result{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}
	}
	if err == nil {
		return out, nil
	}
	for _, m := range errorMap {
		if errors.Is(err, m.from) {
			return out, fmt.Errorf("%w: %w", m.to, err)
		}
	}
	// A plain non-zero exit is the guest's status; msb killed by a signal
	// (a negative status: msb itself reports a guest's signal as 255) is a
	// failure of msb, not a result.
	var exitErr *msb.ExitError
	if errors.As(err, &exitErr) && exitErr.Kind == nil && out != nil && out.ExitCode >= 0 {
		return out, nil
	}
	return out, err
}

var errorMap = []struct{ from, to error }{
	{msb.ErrHostTimeout, session.ErrHostTimeout},
	{msb.ErrAborted, session.ErrAborted},
	{msb.ErrOutputOverflow, session.ErrOutputOverflow},
	{msb.ErrExecTimedOut, session.ErrGuestTimeout},
	{msb.ErrCannotStart, session.ErrCannotStart},
	{msb.ErrSandboxNotFound, session.ErrGone},
}

// CopyIn copies a host file or directory to an absolute guest path: one msb copy.
func (s *Session) CopyIn(ctx context.Context, hostPath, guestPath string) error {
	if err := s.usable(); err != nil {
		return err
	}
	release, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer release()
	ref, err := msb.PathRef(s.names.Sandbox, guestPath)
	if err != nil {
		return fmt.Errorf("%w: %w", session.ErrInvalid, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if err := s.client.Copy(ctx, hostPath, ref); err != nil {
		if stopped := s.stoppedError(context.WithoutCancel(ctx), err); stopped != nil {
			return stopped
		}
		_, mapped := shellResult(nil, err)
		return fmt.Errorf("copy %s to %s: %w", hostPath, guestPath, mapped)
	}
	return nil
}

// Poison marks the session unusable and stops its sandbox, which ends
// whatever the guest may still run (a stop that fails falls back to
// removing the sandbox). The volume, with the agent's files, is kept until
// Close or the reaper. The returned error wraps ErrPoisoned and says so; a
// failure to end the sandbox is joined to it and Close retries the removal.
func (s *Session) Poison(ctx context.Context, cause error) error {
	if cause == nil {
		cause = errors.New("state unknown")
	}
	s.mu.Lock()
	if s.poisonCause == nil {
		s.poisonCause = cause
	}
	s.mu.Unlock()
	s.logger.Warn("session poisoned", "sandbox", s.names.Sandbox, "volume", s.names.Volume, "cause", cause)
	s.closeChannel(true)
	endErr := s.endSandbox(ctx)
	s.mu.Lock()
	err := s.poisonedError()
	s.mu.Unlock()
	if endErr != nil {
		return errors.Join(err, fmt.Errorf("poison %s: the guest may still run: %w", s.names.Sandbox, endErr))
	}
	return err
}

// poisonedError tells the caller what poisoning did and how to get rid of
// what it kept; s.mu must be held.
func (s *Session) poisonedError() error {
	ended, removal := "is used no more", "oma-sandbox session rm "+s.names.Sandbox
	switch {
	case s.sandboxRemoved:
		ended, removal = "was removed", "msb volume remove "+s.names.Volume+", or the reaper"
	case s.sandboxStopped:
		ended = "is stopped and used no more"
	}
	return fmt.Errorf("%w (%v): sandbox %s %s; the agent's files are kept in msb volume %s until the session is removed (%s)",
		session.ErrPoisoned, s.poisonCause, s.names.Sandbox, ended, s.names.Volume, removal)
}

// endSandbox stops the sandbox, or force-removes it if the stop fails, so
// nothing the guest started runs on. It never touches the volume.
func (s *Session) endSandbox(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sandboxStopped || s.sandboxRemoved {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	stopErr := s.client.Stop(rctx, msb.StopOptions{Names: []string{s.names.Sandbox}, Force: true})
	cancel()
	if stopErr == nil || errors.Is(stopErr, msb.ErrSandboxNotFound) {
		s.sandboxStopped = true
		return nil
	}
	rctx, cancel = context.WithTimeout(ctx, s.opTimeout)
	err := s.client.Remove(rctx, msb.RemoveOptions{Names: []string{s.names.Sandbox}, Force: true})
	cancel()
	if err != nil && !errors.Is(err, msb.ErrSandboxNotFound) {
		return fmt.Errorf("stop sandbox: %w; remove sandbox: %w", stopErr, err)
	}
	s.sandboxRemoved = true
	return nil
}

// Close removes the sandbox, then the volume. It is idempotent; a removal
// that failed before is tried again.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeChannel(true)
	if err := s.remove(ctx); err != nil {
		return fmt.Errorf("close %s: %w", s.names.Sandbox, err)
	}
	return nil
}

// remove force-removes whatever of the sandbox and volume is still there,
// sandbox first (msb refuses to remove a volume attached to a live sandbox).
// Already-gone resources count as removed.
func (s *Session) remove(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.sandboxRemoved {
		rctx, cancel := context.WithTimeout(ctx, s.opTimeout)
		err := s.client.Remove(rctx, msb.RemoveOptions{Names: []string{s.names.Sandbox}, Force: true})
		cancel()
		if err != nil && !errors.Is(err, msb.ErrSandboxNotFound) {
			return fmt.Errorf("remove sandbox: %w", err)
		}
		s.sandboxRemoved = true
	}
	if !s.volumeRemoved {
		rctx, cancel := context.WithTimeout(ctx, s.opTimeout)
		err := s.client.VolumeRemove(rctx, s.names.Volume)
		cancel()
		if err != nil && !errors.Is(err, msb.ErrVolumeNotFound) {
			return fmt.Errorf("remove volume: %w", err)
		}
		s.volumeRemoved = true
	}
	return nil
}

func tail(b []byte) string {
	const max = 2048
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
