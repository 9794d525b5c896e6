package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/oma-sandbox/oma-sandbox/internal/safefs"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

const (
	recordFile = "session.json"
	// removingFile marks a session whose removal has begun, in any
	// process (removeSession).
	removingFile = "removing"
	recordV1     = 1
	closeTimeout = 10 * time.Second
	// DefaultMaxOutput caps stdout+stderr of a call when neither the call
	// nor the session's limits say otherwise.
	DefaultMaxOutput = 16 << 20
)

// Options configure Create.
type Options struct {
	// StateDir holds one directory per session (its record, workspace,
	// uploads and outputs). "" means DefaultStateDir().
	StateDir string
	// NamePrefix starts every session name; "" means "oma-local".
	NamePrefix string
	// WorkspaceID and SessionID are the caller's ids: sanitised and bounded
	// in the name, kept whole in the session's record.
	WorkspaceID string
	SessionID   string
	Policy      Policy
	Limits      Limits
	// OperationTimeout bounds every call that names no timeout of its own
	// (ShellOptions.GuestTimeout), as on msb: a guest that blocks a tool
	// (a FIFO under grep, a stalled listing) is killed at this host
	// deadline. 0 means session.DefaultOperationTimeout.
	OperationTimeout time.Duration
	// Env adds variables to every command. Names that look like secrets
	// (token, secret, password, credential, api key, authorization, cookie)
	// are dropped; PATH is fixed and refused.
	Env map[string]string
	// AgentFile is the guest agent (a static linux binary of this host's
	// architecture) whose builtins the tools' calls run; "" means the one
	// bundled into this build. Linux only.
	AgentFile string
	// SandboxPerCall runs every call of the session, from every process
	// that attaches to it, in a sandbox of its own instead of the
	// session's resident sandbox (resident.go): a command's processes
	// end with its call.
	SandboxPerCall bool
	// Bwrap names the bubblewrap binary, looked up in the host's PATH.
	// "" means "bwrap". Linux only.
	Bwrap string
	// Audit receives the execution events of a danger-full-access session.
	// Delivery is best effort: a panicking sink is ignored. It must not block.
	Audit func(AuditEvent)
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// parent is the name of the session a fork was made from.
	parent string
}

// DefaultStateDir is $XDG_STATE_HOME/oma-sandbox/local when XDG_STATE_HOME
// is set, else os.UserCacheDir()/oma-sandbox/local.
func DefaultStateDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "oma-sandbox", "local"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("local sandbox: no state directory: set Options.StateDir or XDG_STATE_HOME: %w", err)
	}
	return filepath.Join(d, "oma-sandbox", "local"), nil
}

// record is a session's persistent description, so another process can
// Attach to it by name.
type record struct {
	Version     int       `json:"version"`
	Name        string    `json:"name"`
	WorkspaceID string    `json:"workspace_id"`
	SessionID   string    `json:"session_id"`
	CreatedAt   time.Time `json:"created_at"`
	Policy      Policy    `json:"policy"`
	Limits      Limits    `json:"limits"`
	// OpTimeout is Options.OperationTimeout; 0 in records written before it
	// existed, meaning the default.
	OpTimeout time.Duration     `json:"operation_timeout,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Bwrap     string            `json:"bwrap,omitempty"`
	// Parent names the session this one was forked from.
	Parent string `json:"parent,omitempty"`
	// PerCall is Options.SandboxPerCall, which binds every process that
	// attaches.
	PerCall bool `json:"sandbox_per_call,omitempty"`
}

// hostDirs are a session's directories on the host. Commands reach only
// Box; the record beside it stays out of their reach on every platform.
type hostDirs struct {
	Root      string // the session's state directory
	Box       string // holds the three directories below
	Workspace string
	Uploads   string
	Outputs   string
	Skills    string
}

func dirsOf(root string) hostDirs {
	box := filepath.Join(root, "box")
	ws := filepath.Join(box, "workspace")
	return hostDirs{
		Root:      root,
		Box:       box,
		Workspace: ws,
		Uploads:   filepath.Join(box, "uploads"),
		Outputs:   filepath.Join(box, "outputs"),
		Skills:    filepath.Join(ws, "skills"),
	}
}

// Session is one local sandbox: a state directory on the host and a policy.
// Shell calls run in the session's resident sandbox where one applies
// (resident.go), else each in a fresh sandbox over that directory, whose
// processes end with the call. It implements session.Session.
type Session struct {
	rec   record
	dirs  hostDirs
	paths session.Paths
	caps  Capabilities
	plat  platform
	env   []string
	log   *slog.Logger
	audit func(AuditEvent)
	mu    sync.Mutex
	// recRead is the record file rec's limits were last read from (nil
	// until limits reads it): Resize in another process replaces it.
	recRead os.FileInfo
	closed  bool
	// poisoned is reported by Poisoned; removed says the host state is gone.
	poisoned bool
	removed  bool
	calls    map[*context.CancelCauseFunc]struct{}
	wg       sync.WaitGroup
	// snaps holds snapshot content by digest for Restore.
	snaps     map[string][]byte
	snapBytes int64
	agent     *agent
	served    servedCounter
	res       residency
	// awake admits this process's calls (a weight of one each) while
	// Pause holds all of it.
	awake *semaphore.Weighted
	// manual: a call on a paused session fails with ErrPaused rather
	// than resuming it (SetAutoResume).
	manual atomic.Bool
}

var _ session.Session = (*Session)(nil)

// Create probes the host, refuses a policy it cannot prove, and creates a
// session's state directory. Nothing runs in the sandbox until Shell.
func Create(ctx context.Context, o Options) (*Session, error) {
	o.Policy = o.Policy.withDefaults()
	if err := o.Policy.validate(); err != nil {
		return nil, err
	}
	if err := o.Limits.validate(); err != nil {
		return nil, err
	}
	if o.OperationTimeout < 0 {
		return nil, &PolicyError{Field: "operation timeout", Value: o.OperationTimeout.String(), Reason: "must not be negative"}
	}
	env, dropped, err := scrubEnv(o.Env)
	if err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if len(dropped) > 0 {
		log.Info("local sandbox: dropped secret-looking variables", "names", dropped)
	}
	stateDir, err := resolveStateDir(o.StateDir)
	if err != nil {
		return nil, err
	}
	pr := probeFor(ctx, probeRequest{bwrap: o.Bwrap, limits: o.Limits}, "")
	caps, plat := pr.caps, pr.plat
	if err := admit(ctx, caps, o.Policy, o.Limits); err != nil {
		return nil, err
	}
	agent := &agent{file: o.AgentFile}
	if _, err := agent.hostPath(); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	rec := record{
		Version: recordV1, Name: sessionName(o.NamePrefix, o.WorkspaceID, o.SessionID, now),
		WorkspaceID: o.WorkspaceID, SessionID: o.SessionID, CreatedAt: now,
		Policy: o.Policy, Limits: o.Limits, OpTimeout: o.OperationTimeout, Env: env, Bwrap: o.Bwrap, Parent: o.parent,
		PerCall: o.SandboxPerCall,
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("local sandbox: state directory: %w", err)
	}
	if err := privateStateDir(stateDir); err != nil {
		return nil, err
	}
	dirs := dirsOf(filepath.Join(stateDir, rec.Name))
	if err := os.Mkdir(dirs.Root, 0o700); err != nil {
		return nil, fmt.Errorf("local sandbox: session directory: %w", err)
	}
	if err := createDirs(dirs, plat, rec); err != nil {
		_ = safefs.RemoveAll(dirs.Root)
		return nil, err
	}
	if err := pr.keep(dirs.Root); err != nil {
		log.Warn("local sandbox: keeping the probe's proof (the next Attach probes again)", "err", err)
	}
	s := newSession(rec, dirs, caps, plat, log)
	s.audit = o.Audit
	s.agent = agent
	return s, nil
}

func createDirs(d hostDirs, plat platform, rec record) error {
	// Skills appear only once materialised, as on msb.
	for _, p := range []string{d.Box, d.Workspace, d.Uploads, d.Outputs} {
		if err := os.Mkdir(p, 0o755); err != nil {
			return fmt.Errorf("local sandbox: session directory: %w", err)
		}
	}
	if err := plat.prepare(d); err != nil {
		return fmt.Errorf("local sandbox: preparing session directories: %w", err)
	}
	return createRecord(d.Root, rec)
}

// createRecord writes a session's record atomically: a reader sees the
// whole record or none.
func createRecord(root string, rec record) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(root, recordFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("local sandbox: writing session record: %w", err)
	}
	return os.Rename(tmp, filepath.Join(root, recordFile))
}

func newSession(rec record, dirs hostDirs, caps Capabilities, plat platform, log *slog.Logger) *Session {
	s := &Session{rec: rec, dirs: dirs, caps: caps, plat: plat, log: log.With("session", rec.Name),
		calls: map[*context.CancelCauseFunc]struct{}{}, agent: &agent{}, awake: semaphore.NewWeighted(awakeWeight)}
	s.res.off = rec.PerCall
	s.paths = plat.paths(dirs)
	s.env = guestEnv(s.paths, rec.Env)
	return s
}

// Attach opens a session created by Create, possibly in another process.
// It probes the host again unless a proof the session keeps of an earlier
// probe, for this program on this host, still holds (see proofPath).
func Attach(ctx context.Context, stateDir, name string) (*Session, error) {
	// msb's name rule, so a local session name is valid there too.
	if msb.ValidateName("session name", name) != nil {
		return nil, &PolicyError{Field: "session name", Value: name, Reason: "not a session name"}
	}
	stateDir, err := resolveStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	if err := privateStateDir(stateDir); err != nil {
		return nil, err
	}
	dirs := dirsOf(filepath.Join(stateDir, name))
	rec, err := readRecord(dirs.Root)
	if errors.Is(err, session.ErrNotFound) {
		// Sessions live in one state directory: say which was searched.
		return nil, fmt.Errorf("local sandbox %s: no such session in %s (one made with another --state-dir or XDG_STATE_HOME is not seen here): %w",
			name, stateDir, session.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if rec.Name != name {
		return nil, fmt.Errorf("local sandbox: record of %s names %q: %w", name, rec.Name, session.ErrInvalid)
	}
	// What Create or an earlier Attach proved of this host, while it holds.
	pr := probeFor(ctx, probeRequest{bwrap: rec.Bwrap, limits: rec.Limits}, dirs.Root)
	if err := admit(ctx, pr.caps, rec.Policy, rec.Limits); err != nil {
		return nil, err
	}
	if err := pr.keep(dirs.Root); err != nil {
		slog.Default().Warn("local sandbox: keeping the probe's proof (the next Attach probes again)", "session", name, "err", err)
	}
	return newSession(rec, dirs, pr.caps, pr.plat, slog.Default()), nil
}

// admit checks probe results against a policy; a probe cut short by ctx
// reports that rather than a missing control.
func admit(ctx context.Context, caps Capabilities, p Policy, l Limits) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("local sandbox: probing the host: %w", session.ErrHostTimeout)
	case ctx.Err() != nil:
		return fmt.Errorf("local sandbox: probing the host: %w", session.ErrAborted)
	}
	return caps.check(p, l)
}

func resolveStateDir(dir string) (string, error) {
	if dir == "" {
		return DefaultStateDir()
	}
	return filepath.Abs(dir)
}

func readRecord(root string) (record, error) {
	var rec record
	f, err := os.Open(filepath.Join(root, recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, fmt.Errorf("local sandbox %s: %w", filepath.Base(root), session.ErrNotFound)
	}
	if err != nil {
		return rec, err
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, fmt.Errorf("local sandbox %s: unreadable record: %v: %w", filepath.Base(root), err, session.ErrInvalid)
	}
	if rec.OpTimeout < 0 {
		return rec, fmt.Errorf("local sandbox %s: negative operation timeout in record: %w", filepath.Base(root), session.ErrInvalid)
	}
	if rec.Version != recordV1 {
		return rec, fmt.Errorf("local sandbox %s: record version %d unknown: %w", filepath.Base(root), rec.Version, session.ErrInvalid)
	}
	rec.Policy = rec.Policy.withDefaults()
	if err := rec.Policy.validate(); err != nil {
		return rec, err
	}
	return rec, rec.Limits.validate()
}

// opTimeout bounds a call that names no timeout of its own.
// OperationTimeout bounds every call that names no timeout of its own
// (Options.OperationTimeout); tools.New takes it as the tools' default.
func (s *Session) OperationTimeout() time.Duration { return s.opTimeout() }

func (s *Session) opTimeout() time.Duration {
	if s.rec.OpTimeout > 0 {
		return s.rec.OpTimeout
	}
	return session.DefaultOperationTimeout
}

// Name identifies the session for Attach.
func (s *Session) Name() string { return s.rec.Name }

// ProcessesEndWithCall reports that no process outlives its Shell call,
// so the bash tool does not promise background processes a future: true
// unless calls may run in the session's resident sandbox.
func (s *Session) ProcessesEndWithCall() bool { return !s.mayBeResident() }

// Paths are where the session's directories appear to commands: the guest
// paths on Linux, the host paths on macOS and Windows.
func (s *Session) Paths() session.Paths { return s.paths }

// Capabilities are the probe results the session was admitted with.
func (s *Session) Capabilities() Capabilities { return s.caps }

// Poisoned reports whether Poison was called.
func (s *Session) Poisoned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.poisoned
}

// begin registers a call, or refuses it on a closed or poisoned session.
func (s *Session) begin(ctx context.Context) (context.Context, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.poisoned:
		return nil, nil, fmt.Errorf("local sandbox %s: %w", s.rec.Name, session.ErrPoisoned)
	case s.closed:
		return nil, nil, fmt.Errorf("local sandbox %s: %w", s.rec.Name, session.ErrClosed)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	key := &cancel
	s.calls[key] = struct{}{}
	s.wg.Add(1)
	return cctx, func() {
		s.mu.Lock()
		delete(s.calls, key)
		s.mu.Unlock()
		cancel(nil)
		s.wg.Done()
	}, nil
}

// Poison is told that a call left the guest's state unknown. On Linux
// the session's resident sandbox, if one runs, is ended with everything
// in it, and every other call is its own sandbox whose pid namespace
// ended with its Shell call: nothing is left unknown, and the session
// stays usable (its next call starts a new resident sandbox). Elsewhere a detached process may outlive
// its call: the session is marked unusable and its running calls are
// killed. The workspace is kept either way; only Close removes it.
func (s *Session) Poison(ctx context.Context, cause error) error {
	if runtime.GOOS == "linux" {
		s.stopResident("the poisoning of the session (a call left the guest's state unknown)")
		s.log.Info("local sandbox: the call's processes ended with its sandbox; nothing to poison", "cause", cause)
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.poisoned = true
	for c := range s.calls {
		(*c)(session.ErrPoisoned)
	}
	s.log.Warn("local sandbox poisoned", "cause", cause)
	return fmt.Errorf("local sandbox %s: %w (%v): the workspace %s is kept until the session is removed (oma-sandbox session rm %s)",
		s.rec.Name, session.ErrPoisoned, cause, s.dirs.Workspace, s.rec.Name)
}

// Close kills running calls, waits for them (bounded), then removes the
// session's cgroups and state directory. Idempotent.
func (s *Session) Close(ctx context.Context) error {
	return s.shutdown(ctx, session.ErrClosed)
}

func (s *Session) shutdown(ctx context.Context, why error) error {
	s.mu.Lock()
	s.closed = true
	for c := range s.calls {
		(*c)(why)
	}
	done := s.removed
	s.mu.Unlock()
	if done {
		return nil
	}
	markRemoving(s.dirs.Root)
	s.stopResident("")
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	timer := time.NewTimer(closeTimeout)
	defer timer.Stop()
	select {
	case <-waited:
	case <-ctx.Done():
		return fmt.Errorf("local sandbox %s: calls still running at close: %w", s.rec.Name, ctx.Err())
	case <-timer.C:
		return fmt.Errorf("local sandbox %s: calls still running %s after close", s.rec.Name, closeTimeout)
	}
	// A call that passed begin before the close may have started one.
	s.stopResident("")
	if err := removeSession(s.dirs.Root); err != nil {
		return fmt.Errorf("local sandbox %s: removing state: %w", s.rec.Name, err)
	}
	s.mu.Lock()
	s.removed = true
	s.mu.Unlock()
	return nil
}

// removing reports whether a removal of the session has begun and not
// ended, in this process or another (its mark is there).
func (s *Session) removing() bool { return marked(s.dirs.Root, removingFile) }

// marked reports whether the state directory root holds the mark name (a
// file of the host's that any process of it may have left).
func marked(root, name string) bool {
	_, err := os.Lstat(filepath.Join(root, name))
	return err == nil
}

// removedElsewhere reports whether the session's removal has begun or
// ended, in this process or another.
func (s *Session) removedElsewhere() bool {
	if s.removing() {
		return true
	}
	_, err := os.Lstat(filepath.Join(s.dirs.Root, recordFile))
	return errors.Is(err, fs.ErrNotExist)
}

// markRemoving says that the session's removal has begun, before any of
// its processes is stopped: a call of another process then ends with
// ErrGone, rather than as a broken call or by starting a sandbox over a
// box being removed. The directory is the host's; an error here is one
// the removal meets too.
func markRemoving(root string) {
	_ = os.WriteFile(filepath.Join(root, removingFile), nil, 0o600)
}

func (s *Session) gone() error {
	return fmt.Errorf("local sandbox %s: %w", s.rec.Name, session.ErrGone)
}

// removeSession stops whatever still runs for the session, in any
// process, removes its cgroups, then the box the guest wrote, and only
// then the record: a removal that fails leaves the session listed, so
// Close, `session rm` or Reap can finish it later.
func removeSession(root string) error {
	markRemoving(root)
	// A paused session's processes are frozen: thawed, they can die.
	thawCgroups(root)
	if err := stopSessionProcesses(dirsOf(root)); err != nil {
		return err
	}
	if err := removeCgroups(root); err != nil {
		return err
	}
	if err := safefs.RemoveAll(filepath.Join(root, "box")); err != nil {
		return err
	}
	return safefs.RemoveAll(root)
}
