package microvm_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

var fixedNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func options(env *fakemsbtest.Env) microvm.Options {
	return microvm.Options{
		Client:      msb.NewClient(&msb.CLI{Path: env.Bin}),
		WorkspaceID: "Workspace 42",
		SessionID:   "sess/7",
		Image:       "debian",
		Now:         func() time.Time { return fixedNow },
		Random:      func() uint64 { return 12345 },
		// These tests count and read msb invocations of the one exec per
		// call path; channel_test.go covers the agent's channel.
		NoChannel: true,
	}
}

// createSession creates a session with o, closed when the test ends.
func createSession(t *testing.T, o microvm.Options) *microvm.Session {
	t.Helper()
	s, err := microvm.Create(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func argvs(t *testing.T, env *fakemsbtest.Env) [][]string {
	var out [][]string
	for _, inv := range env.Invocations(t) {
		out = append(out, inv.Argv)
	}
	return out
}

func TestCreateArgvAndBudget(t *testing.T) {
	env := fakemsbtest.New(t)
	s := createSession(t, options(env))

	names := s.Names()
	assert.Equal(t, "oma-workspace-42-sess-7-mx1seio0-0009ix-sandbox", names.Sandbox)
	assert.Equal(t, names.Stem+"-workspace", names.Volume)

	calls := argvs(t, env)
	require.Len(t, calls, 2, "create + one prepare exec")
	agent := calls[0][slices.Index(calls[0], "--copy-file")+1]
	assert.True(t, strings.HasSuffix(agent, ":/.oma-sandbox/agent"), agent)
	assert.Equal(t, []string{
		"create", "debian", "--name", names.Sandbox,
		"--mount-named", names.Volume + ":/workspace",
		"--copy-file", agent,
		"--workdir", "/workspace", "--no-net",
		"--tmpfs", "/mnt/session/uploads:64M:nosuid,nodev,noexec",
		"--tmpfs", "/mnt/session/outputs:100M:nosuid,nodev,noexec",
		"--cpus", "1", "--memory", "1G", "--root-disk", "1G", "--max-duration", "2h",
		"--security", "restricted", "--pull", "if-missing", "--quiet",
		"--label", "open-managed-agents.sandbox=microsandbox-local",
		"--label", "open-managed-agents.owner=open-managed-agents",
		"--label", "open-managed-agents.workspace-id=Workspace 42",
		"--label", "open-managed-agents.session-id=sess/7",
		"--label", "open-managed-agents.created-at=2026-11-29T12:00:00.000Z",
	}, calls[0])
	assert.Equal(t, []string{"exec", "--user", "0", "--timeout", "10s", "--workdir", "/workspace", names.Sandbox, "--",
		"/.oma-sandbox/agent", "builtin", "prepare", "/mnt/session/uploads", "/mnt/session/outputs", "/workspace"}, calls[1])
	assert.Equal(t, []string{names.Sandbox}, env.Sandboxes(t))
	assert.Equal(t, []string{names.Volume}, env.Volumes(t))

	// The prepared mounts have the owners and modes the tools rely on.
	res, err := s.Shell(context.Background(), session.Command{Script: `stat -c '%u %a' /mnt/session/uploads /mnt/session/outputs`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "0 755\n65534 700\n", string(res.Stdout))
}

// A failure at each creation step leaves no sandbox and no volume behind,
// and the original error is returned.
func TestCreateFailureCleansUp(t *testing.T) {
	cases := []struct {
		name, faults, want string
		opts               func(*microvm.Options)
	}{
		{name: "create fails", faults: "create#1=exit:1:error: image pull failed", want: "image pull failed"},
		{name: "create hangs", faults: "create#1=hang", want: "host deadline exceeded",
			opts: func(o *microvm.Options) { o.StartupTimeout = time.Second }},
		{name: "prepare fails", faults: "exec#1=exit:1:error: guest agent unreachable", want: "guest agent unreachable"},
		{name: "preflight fails", faults: "exec#1=exit:3:grep preflight: no match exits 2, not 1", want: "grep preflight: no match exits 2, not 1"},
		{name: "prepare hangs", faults: "exec#1=hang", want: "host deadline exceeded",
			opts: func(o *microvm.Options) { o.OperationTimeout = time.Second }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := fakemsbtest.New(t)
			env.SetKnob("FAKEMSB_FAULTS", c.faults)
			o := options(env)
			if c.opts != nil {
				c.opts(&o)
			}
			_, err := microvm.Create(context.Background(), o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			env.SetKnob("FAKEMSB_FAULTS", "")
			assert.Empty(t, env.Sandboxes(t), "sandbox left behind")
			assert.Empty(t, env.Volumes(t), "volume left behind")
		})
	}
}

// A cleanup that fails too is reported beside the create's own error,
// never in its place: the caller still learns why the create failed and can
// test its kind.
func TestCreateKeepsTheOriginalErrorWhenCleanupFails(t *testing.T) {
	env := fakemsbtest.New(t)
	env.SetKnob("FAKEMSB_FAULTS", "exec#1=exit:1:error: guest agent unreachable;remove#1=exit:1:error: disk busy;remove#2=exit:1:error: disk busy")
	o := options(env)
	o.OperationTimeout = time.Second
	_, err := microvm.Create(context.Background(), o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "guest agent unreachable", "the create's own error")
	assert.Contains(t, err.Error(), "disk busy", "the cleanup's error beside it")

	env.SetKnob("FAKEMSB_FAULTS", "create#1=hang;remove=exit:1:error: disk busy")
	o.StartupTimeout = time.Second
	_, err = microvm.Create(context.Background(), o)
	assert.ErrorIs(t, err, msb.ErrHostTimeout, "the create's kind survives a failed cleanup")
	assert.Contains(t, err.Error(), "disk busy")
}

// A cleanup step that fails once is tried again: the caller has no session
// to Close, so a transient failure would otherwise leak the volume.
func TestFailedCreateRetriesItsCleanup(t *testing.T) {
	for _, fault := range []string{"remove#1=exit:1:error: disk busy", "volume-remove#1=exit:1:error: disk busy", "volume-remove#1=hang"} {
		t.Run(fault, func(t *testing.T) {
			env := fakemsbtest.New(t)
			env.SetKnob("FAKEMSB_FAULTS", "exec#1=exit:1:error: guest agent unreachable;"+fault)
			o := options(env)
			o.OperationTimeout = time.Second
			_, err := microvm.Create(context.Background(), o)
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "disk busy", "the retry succeeded")
			env.SetKnob("FAKEMSB_FAULTS", "")
			assert.Empty(t, env.Sandboxes(t))
			assert.Empty(t, env.Volumes(t))
		})
	}
}

// volumeFirst plays msb 0.6's create as it fails on a host that cannot
// boot a VM: the named volume is made first, then the create fails, with no
// sandbox left behind.
type volumeFirst struct{ inner msb.Runner }

func (r volumeFirst) Run(ctx context.Context, c msb.Call) (*msb.Result, error) {
	if len(c.Args) > 0 && c.Args[0] == "create" {
		i := slices.Index(c.Args, "--mount-named")
		volume, _, _ := strings.Cut(c.Args[i+1], ":")
		args, err := msb.VolumeCreateOptions{Name: volume}.Args()
		if err != nil {
			return nil, err
		}
		if _, err := r.inner.Run(ctx, msb.Call{Args: args}); err != nil {
			return nil, err
		}
	}
	return r.inner.Run(ctx, c)
}

// A create that fails after msb made the volume removes that volume too,
// although there is no sandbox to remove.
func TestFailedCreateRemovesItsVolume(t *testing.T) {
	env := fakemsbtest.New(t)
	env.SetKnob("FAKEMSB_FAULTS", "create#1=exit:1:error: failed to start the VM")
	o := options(env)
	o.Client = msb.NewClient(volumeFirst{inner: &msb.CLI{Path: env.Bin}})
	_, err := microvm.Create(context.Background(), o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "failed to start the VM")
	assert.Empty(t, env.Sandboxes(t))
	assert.Empty(t, env.Volumes(t), "the volume the failed create made is removed")
}

// TestShellOutcomes: over one exec per call and over the agent's channel,
// the same outcomes map onto the same Session errors.
func TestShellOutcomes(t *testing.T) {
	for _, transport := range []string{"exec", "channel"} {
		t.Run(transport, func(t *testing.T) {
			env := fakemsbtest.New(t)
			o := options(env)
			if transport == "channel" {
				o.NoChannel, o.AgentFile = false, agenttest.AgentBinary(t)
			}
			s := createSession(t, o)
			testShellOutcomes(t, s)
			if transport == "channel" {
				assert.Len(t, env.Channel(s.Name()).Msb, 1, "the calls went over the channel")
			}
		})
	}
}

func testShellOutcomes(t *testing.T, s *microvm.Session) {
	ctx := context.Background()

	res, err := s.Shell(ctx, session.Command{Script: `echo "out $1"; echo err >&2; exit 7`, Args: []string{"a b"}}, session.ShellOptions{})
	require.NoError(t, err, "a guest's exit code is a result, not an error")
	assert.Equal(t, 7, res.ExitCode)
	assert.Equal(t, "out a b\n", string(res.Stdout))
	assert.Equal(t, "err\n", string(res.Stderr))

	var streamed bytes.Buffer
	res, err = s.Shell(ctx, session.Command{Script: `cat; printf tail`}, session.ShellOptions{
		Stdin: strings.NewReader("from stdin\n"), Stdout: func(p []byte) { streamed.Write(p) },
	})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "from stdin\ntail", streamed.String())

	_, err = s.Shell(ctx, session.Command{Script: `sleep 30`}, session.ShellOptions{GuestTimeout: time.Second})
	assert.ErrorIs(t, err, session.ErrGuestTimeout)

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = s.Shell(short, session.Command{Script: `sleep 30`}, session.ShellOptions{})
	assert.ErrorIs(t, err, session.ErrHostTimeout)

	aborted, abort := context.WithCancel(ctx)
	go func() { time.Sleep(300 * time.Millisecond); abort() }()
	_, err = s.Shell(aborted, session.Command{Script: `sleep 30`}, session.ShellOptions{})
	assert.ErrorIs(t, err, session.ErrAborted)

	_, err = s.Shell(ctx, session.Command{Script: `head -c 100000 /dev/zero`}, session.ShellOptions{MaxOutput: 1000})
	assert.ErrorIs(t, err, session.ErrOutputOverflow)

	_, err = s.Shell(ctx, session.Command{Script: `true`}, session.ShellOptions{Workdir: "/missing"})
	assert.NoError(t, err, "msb's missing-workdir quirk is an exit code, not an error")

	res, err = s.Shell(ctx, session.Command{Script: `kill -9 $$`}, session.ShellOptions{})
	require.NoError(t, err, "a signal death is a result")
	assert.Equal(t, 255, res.ExitCode, "reported as msb does")

	res, err = s.Shell(ctx, session.Command{Script: `id -u; pwd`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "65534\n/workspace\n", string(res.Stdout), "the image's user, in the workspace")
	res, err = s.Shell(ctx, session.Command{Script: `id -u; pwd`}, session.ShellOptions{User: "0", Workdir: "/tmp"})
	require.NoError(t, err)
	assert.Equal(t, "0\n/tmp\n", string(res.Stdout))

	assert.False(t, s.Poisoned(), "none of these poison the session")
}

func TestCloseOrderAndIdempotence(t *testing.T) {
	env := fakemsbtest.New(t)
	s, err := microvm.Create(context.Background(), options(env))
	require.NoError(t, err)
	env.ResetLog(t)

	require.NoError(t, s.Close(context.Background()))
	assert.Equal(t, [][]string{
		{"remove", "--force", s.Names().Sandbox},
		{"volume", "remove", s.Names().Volume},
	}, argvs(t, env), "sandbox first, then its volume")
	assert.Empty(t, env.Sandboxes(t))
	assert.Empty(t, env.Volumes(t))

	require.NoError(t, s.Close(context.Background()))
	assert.Len(t, env.Invocations(t), 2, "a second Close runs nothing")
	_, err = s.Shell(context.Background(), session.Command{Script: "true"}, session.ShellOptions{})
	assert.ErrorIs(t, err, session.ErrClosed)
	assert.Len(t, env.Invocations(t), 2, "a closed session starts nothing")
}

// Poisoning ends what the guest may still run but never the agent's files:
// the sandbox is stopped, the volume kept until Close, and the error says
// where the files are and how to remove them.
func TestPoisonKeepsTheWorkspace(t *testing.T) {
	env := fakemsbtest.New(t)
	s, err := microvm.Create(context.Background(), options(env))
	require.NoError(t, err)
	_, err = s.Shell(context.Background(), session.Command{Script: `echo kept > /workspace/notes.txt; sleep 300 >/dev/null 2>&1 & echo started`}, session.ShellOptions{})
	require.NoError(t, err)
	env.ResetLog(t)

	err = s.Poison(context.Background(), errors.New("no readiness marker"))
	require.ErrorIs(t, err, session.ErrPoisoned)
	for _, want := range []string{"no readiness marker", s.Names().Volume, "oma-sandbox session rm " + s.Name()} {
		assert.Contains(t, err.Error(), want)
	}
	assert.True(t, s.Poisoned())
	assert.Equal(t, [][]string{{"stop", "--force", s.Name()}}, argvs(t, env), "the sandbox is stopped, nothing removed")
	assert.Empty(t, env.Holders(), "stopping ended the guest's processes")
	assert.Equal(t, []string{s.Names().Volume}, env.Volumes(t), "the workspace volume is kept")

	_, err = s.Shell(context.Background(), session.Command{Script: "true"}, session.ShellOptions{})
	assert.ErrorIs(t, err, session.ErrPoisoned)
	assert.Contains(t, err.Error(), s.Names().Volume, "every later call says where the files are")
	require.ErrorIs(t, s.Poison(context.Background(), errors.New("again")), session.ErrPoisoned)
	assert.Len(t, env.Invocations(t), 1, "a poisoned session starts nothing, and is stopped once")

	data, err := os.ReadFile(filepath.Join(env.Home, "volumes", s.Names().Volume, "notes.txt"))
	require.NoError(t, err)
	assert.Equal(t, "kept\n", string(data), "the agent's file is in the kept volume")

	require.NoError(t, s.Close(context.Background()), "only Close removes the workspace")
	assert.Empty(t, env.Sandboxes(t))
	assert.Empty(t, env.Volumes(t))
}

// TestInstallLeaseRefusalIsNoGuestExit: while msb refuses every command
// for its install lease (exit 1, its message alone on stderr), a command
// fails with that error, saying until when msb refuses; the refusal does
// not pass for the command's own exit 1, and poisons nothing.
func TestInstallLeaseRefusalIsNoGuestExit(t *testing.T) {
	env := fakemsbtest.New(t)
	s := createSession(t, options(env))
	s.DisableAgentChannel() // one msb exec per call: its exit status is the command's
	ctx := context.Background()
	until := time.Now().Add(20 * time.Minute).UTC().Truncate(time.Microsecond)
	env.SetKnob("FAKEMSB_FAULTS", "exec=exit:1:error: runtime error: another microsandbox install operation is in progress until "+
		until.Format("2006-01-02 15:04:05.999999"))
	res, err := s.Shell(ctx, session.Command{Script: `exit 3`}, session.ShellOptions{})
	require.ErrorIs(t, err, msb.ErrInstallInProgress, "result %+v", res)
	assert.Contains(t, err.Error(), "refuses every command until "+until.Format(time.RFC3339))
	assert.False(t, s.Poisoned())

	env.SetKnob("FAKEMSB_FAULTS", "")
	res, err = s.Shell(ctx, session.Command{Script: `exit 3`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, 3, res.ExitCode, "once msb answers, the command's own status")

	// A guest that prints the refusal alone fails only its own call.
	refusal := `error: runtime error: microsandbox install operation in progress until 2030-01-01 00:00:00; retry after it completes`
	_, err = s.Shell(ctx, session.Command{Script: `echo '` + refusal + `' >&2; exit 1`}, session.ShellOptions{})
	require.ErrorIs(t, err, msb.ErrInstallInProgress)
	assert.False(t, s.Poisoned())
	res, err = s.Shell(ctx, session.Command{Script: `echo 'partial'; echo '` + refusal + `' >&2; exit 1`}, session.ShellOptions{})
	require.NoError(t, err, "with output of its own it is the guest's")
	assert.Equal(t, 1, res.ExitCode)
	res, err = s.Shell(ctx, session.Command{Script: `exit 3`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, 3, res.ExitCode)
}

// A later process that attaches to a poisoned session finds its sandbox
// stopped: msb's exec or copy fails to start it again (where no VM boots;
// fakemsb's faults stand in for that), and the call returns the session's
// recovery message, wrapping ErrPoisoned, rather than msb's own error as
// the command's output. A guest that prints msb's message itself poisons
// nothing: the sandbox runs.
func TestAttachToPoisonedSession(t *testing.T) {
	env := fakemsbtest.New(t)
	client := msb.NewClient(&msb.CLI{Path: env.Bin})
	s := createSession(t, options(env))
	failedStart := `error: failed to start "` + s.Name() + `"`

	forged, err := s.Shell(context.Background(), session.Command{Script: `echo kept > /workspace/notes.txt; echo '` + failedStart + `' >&2; exit 1`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, 1, forged.ExitCode)
	assert.False(t, s.Poisoned(), "a guest's forged message poisons nothing")
	require.ErrorIs(t, s.Poison(context.Background(), errors.New("no readiness marker")), session.ErrPoisoned)

	env.SetKnob("FAKEMSB_FAULTS", "exec=exit:1:"+failedStart+";copy=exit:1:"+failedStart)
	for _, call := range []struct {
		name string
		run  func(s *microvm.Session) error
	}{
		{"exec", func(s *microvm.Session) error {
			_, err := s.Shell(context.Background(), session.Command{Script: `cat /workspace/notes.txt`}, session.ShellOptions{})
			return err
		}},
		{"copy", func(s *microvm.Session) error {
			return s.CopyIn(context.Background(), "/etc/hostname", "/workspace/x")
		}},
	} {
		other, err := microvm.Attach(client, "", s.Name())
		require.NoError(t, err)
		other.DisableAgentChannel() // the exec path's own detection
		env.ResetLog(t)
		err = call.run(other)
		require.ErrorIs(t, err, session.ErrPoisoned, call.name)
		for _, want := range []string{"Stopped", s.Names().Volume, "oma-sandbox session rm " + s.Name()} {
			assert.Contains(t, err.Error(), want, call.name)
		}
		assert.True(t, other.Poisoned(), call.name)
		assert.Len(t, env.Invocations(t), 2, "%s: the call, then one inspect", call.name)
		assert.ErrorIs(t, call.run(other), session.ErrPoisoned, "%s: every later call", call.name)
		assert.Len(t, env.Invocations(t), 2, "%s: a poisoned session starts nothing", call.name)
	}
	assert.Equal(t, []string{s.Name()}, env.Sandboxes(t))
	assert.Equal(t, []string{s.Names().Volume}, env.Volumes(t))

	other, err := microvm.Attach(client, "", s.Name())
	require.NoError(t, err)
	require.NoError(t, other.Close(context.Background()), "session rm removes it")
	assert.Empty(t, env.Sandboxes(t))
	assert.Empty(t, env.Volumes(t))
}

// A stop that fails falls back to removing the sandbox; the volume is still
// kept. When both fail the guest may still run: the error says so and Close
// retries the removal.
func TestPoisonWhenTheStopFails(t *testing.T) {
	t.Run("stop fails", func(t *testing.T) {
		env := fakemsbtest.New(t)
		s, err := microvm.Create(context.Background(), options(env))
		require.NoError(t, err)
		env.SetKnob("FAKEMSB_FAULTS", "stop#1=exit:1:error: stuck")
		err = s.Poison(context.Background(), errors.New("cleanup failed"))
		require.ErrorIs(t, err, session.ErrPoisoned)
		assert.NotContains(t, err.Error(), "may still run")
		assert.Contains(t, err.Error(), "msb volume remove "+s.Names().Volume)
		assert.Empty(t, env.Sandboxes(t), "the sandbox was removed instead")
		assert.Equal(t, []string{s.Names().Volume}, env.Volumes(t), "the workspace volume is kept")
		require.NoError(t, s.Close(context.Background()))
		assert.Empty(t, env.Volumes(t))
	})
	t.Run("stop and remove fail", func(t *testing.T) {
		env := fakemsbtest.New(t)
		s, err := microvm.Create(context.Background(), options(env))
		require.NoError(t, err)
		env.SetKnob("FAKEMSB_FAULTS", "stop#1=exit:1:error: stuck;remove#1=exit:1:error: disk busy")
		err = s.Poison(context.Background(), errors.New("cleanup failed"))
		require.ErrorIs(t, err, session.ErrPoisoned)
		assert.Contains(t, err.Error(), "the guest may still run")
		assert.Contains(t, err.Error(), "disk busy")
		assert.Equal(t, []string{s.Name()}, env.Sandboxes(t))
		assert.Equal(t, []string{s.Names().Volume}, env.Volumes(t))

		env.ResetLog(t)
		require.NoError(t, s.Close(context.Background()), "Close retries the removal")
		assert.Equal(t, [][]string{{"remove", "--force", s.Name()}, {"volume", "remove", s.Names().Volume}}, argvs(t, env))
		assert.Empty(t, env.Sandboxes(t))
		assert.Empty(t, env.Volumes(t))
	})
}

// A removal that fails at Close is retried by the next Close, and only what
// failed is retried.
func TestCloseRetriesFailedRemoval(t *testing.T) {
	env := fakemsbtest.New(t)
	s, err := microvm.Create(context.Background(), options(env))
	require.NoError(t, err)
	env.SetKnob("FAKEMSB_FAULTS", "volume-remove#1=exit:1:error: disk busy")

	err = s.Close(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "disk busy")
	assert.Empty(t, env.Sandboxes(t), "the sandbox went at once")
	assert.Equal(t, []string{s.Names().Volume}, env.Volumes(t), "the failed volume removal is still pending")

	env.ResetLog(t)
	require.NoError(t, s.Close(context.Background()))
	assert.Equal(t, [][]string{{"volume", "remove", s.Names().Volume}}, argvs(t, env), "only what failed is retried")
	assert.Empty(t, env.Volumes(t))
}

func TestAttach(t *testing.T) {
	env := fakemsbtest.New(t)
	client := msb.NewClient(&msb.CLI{Path: env.Bin})
	created, err := microvm.Create(context.Background(), options(env))
	require.NoError(t, err)
	env.ResetLog(t)

	s, err := microvm.Attach(client, "", created.Name())
	require.NoError(t, err)
	assert.Empty(t, env.Invocations(t), "attaching costs no msb invocation")
	assert.Equal(t, created.Names(), s.Names())

	res, err := s.Shell(context.Background(), session.Command{Script: "echo hi"}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "hi\n", string(res.Stdout))
	require.NoError(t, s.Close(context.Background()))
	assert.Empty(t, env.Sandboxes(t))
	assert.Empty(t, env.Volumes(t))

	_, err = microvm.Attach(client, "", "someone-elses-box")
	assert.ErrorIs(t, err, session.ErrInvalid)
	_, err = microvm.Attach(client, "oma-ci", created.Name())
	assert.ErrorIs(t, err, session.ErrInvalid)
	assert.ErrorContains(t, err, `prefix "oma-ci": want 1 to 16 characters`)

	gone, err := microvm.Attach(client, "", created.Name())
	require.NoError(t, err)
	_, err = gone.Shell(context.Background(), session.Command{Script: "true"}, session.ShellOptions{})
	assert.ErrorIs(t, err, session.ErrGone)
	assert.ErrorIs(t, err, session.ErrNotFound)
}

func TestCreateRefusesBadOptions(t *testing.T) {
	env := fakemsbtest.New(t)
	for _, mod := range []func(*microvm.Options){
		func(o *microvm.Options) { o.WorkspaceID = "" },
		func(o *microvm.Options) { o.Memory = "1Gi" },
		func(o *microvm.Options) { o.Image = "-evil" },
		func(o *microvm.Options) { o.MaxDuration = "1h30m" },
		func(o *microvm.Options) { o.Prefix = "oma-ci" }, // its names would read as prefix oma's too
	} {
		o := options(env)
		mod(&o)
		_, err := microvm.Create(context.Background(), o)
		assert.ErrorIs(t, err, session.ErrInvalid)
	}
	assert.Empty(t, env.Invocations(t), "bad options start nothing")
}
