package microvm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

func sandboxStatus(t *testing.T, env *fakemsbtest.Env, name string) string {
	t.Helper()
	list, err := msb.NewClient(&msb.CLI{Path: env.Bin}).List(context.Background(), msb.ListOptions{})
	require.NoError(t, err)
	for _, s := range list {
		if s.Name == name {
			return s.Status
		}
	}
	return ""
}

func commands(t *testing.T, env *fakemsbtest.Env) []string {
	var out []string
	for _, argv := range argvs(t, env) {
		out = append(out, argv[0])
	}
	return out
}

// Write, pause (the listing shows the sandbox stopped), then a tool call
// resumes it with one msb start and reads the file back; the sandbox stays
// up afterwards. Closing a paused session removes everything.
func TestPauseResumeOnUse(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	s, err := microvm.Create(ctx, options(env))
	require.NoError(t, err)
	name := s.Names().Sandbox
	_, err = s.Shell(ctx, session.Command{Script: `echo kept >note.txt`}, session.ShellOptions{})
	require.NoError(t, err)

	env.ResetLog(t)
	require.NoError(t, s.Pause(ctx))
	require.NoError(t, s.Pause(ctx), "pause is idempotent")
	assert.Equal(t, []string{"stop", "stop"}, commands(t, env), "each pause stops it: another process may have resumed it since")
	assert.Equal(t, "Stopped", sandboxStatus(t, env, name))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, session.StatePaused, st.State)
	assert.Nil(t, st.MemoryBytes, "a stopped sandbox has no live metrics")
	require.NotNil(t, st.DiskUsedBytes)
	assert.Positive(t, *st.DiskUsedBytes)

	env.ResetLog(t)
	res, err := s.Shell(ctx, session.Command{Script: `cat note.txt`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "kept\n", string(res.Stdout))
	assert.Equal(t, []string{"start", "exec"}, commands(t, env))
	assert.Equal(t, "Running", sandboxStatus(t, env, name), "the resumed sandbox stays up")

	// The hot path: a call on a running session, created or attached with
	// auto-resume, is one msb exec and nothing else (no inspect).
	other, err := microvm.Attach(msb.NewClient(&msb.CLI{Path: env.Bin}), "", name)
	require.NoError(t, err)
	other.DisableAgentChannel() // else its first call asks inspect whether the sandbox has the agent
	for _, sess := range []*microvm.Session{s, other} {
		env.ResetLog(t)
		_, err = sess.Shell(ctx, session.Command{Script: `true`}, session.ShellOptions{})
		require.NoError(t, err)
		assert.Equal(t, []string{"exec"}, commands(t, env))
	}

	require.NoError(t, s.Pause(ctx))
	require.NoError(t, s.Close(ctx))
	assert.Empty(t, env.Sandboxes(t))
	assert.Empty(t, env.Volumes(t))
}

// With auto-resume off, a call on a paused session fails with ErrPaused and
// starts nothing (it asks msb first: TestAttachedPausedSession); Resume
// makes it usable again.
func TestPausedWithoutAutoResume(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	o := options(env)
	o.NoAutoResume = true
	s := createSession(t, o)
	require.NoError(t, s.Pause(ctx))

	env.ResetLog(t)
	_, err := s.Shell(ctx, session.Command{Script: `true`}, session.ShellOptions{})
	assert.ErrorIs(t, err, session.ErrPaused)
	assert.ErrorContains(t, err, "session resume "+s.Name())
	assert.ErrorIs(t, s.CopyIn(ctx, t.TempDir(), "/workspace/x"), session.ErrPaused)
	assert.Equal(t, []string{"inspect", "inspect"}, commands(t, env), "a refused call asks msb whether it is still stopped, and starts nothing")
	assert.Equal(t, "Stopped", sandboxStatus(t, env, s.Name()))

	env.ResetLog(t)
	require.NoError(t, s.Resume(ctx))
	require.NoError(t, s.Resume(ctx), "resume is idempotent")
	res, err := s.Shell(ctx, session.Command{Script: `echo up`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "up\n", string(res.Stdout))
	assert.Equal(t, []string{"start", "exec"}, commands(t, env))
}

// Another process attaches to a paused session: without auto-resume it asks
// msb (inspect) and refuses; Resume starts it, and the next call, asking
// again, runs; a pause of the first process stops it again; with
// auto-resume, a call on a state learned stale runs.
func TestAttachedPausedSession(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	s := createSession(t, options(env))
	require.NoError(t, s.Pause(ctx))

	client := msb.NewClient(&msb.CLI{Path: env.Bin})
	other, err := microvm.Attach(client, "", s.Name())
	require.NoError(t, err)
	other.SetAutoResume(false)
	env.ResetLog(t)
	_, err = other.Shell(ctx, session.Command{Script: `true`}, session.ShellOptions{})
	assert.ErrorIs(t, err, session.ErrPaused)
	assert.Equal(t, []string{"inspect"}, commands(t, env))

	third, err := microvm.Attach(client, "", s.Name())
	require.NoError(t, err)
	env.ResetLog(t)
	require.NoError(t, third.Resume(ctx))
	assert.Equal(t, []string{"inspect", "start"}, commands(t, env))
	assert.Equal(t, "Running", sandboxStatus(t, env, s.Name()))
	st, err := third.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, session.StateRunning, st.State)
	require.NotNil(t, st.MemoryLimitBytes)
	assert.Equal(t, int64(1<<30), *st.MemoryLimitBytes)
	require.NotNil(t, st.CPUs)
	assert.Equal(t, 1, *st.CPUs)

	// The paused state other learned is stale now: before refusing a call
	// it asks msb again, and the call runs.
	env.ResetLog(t)
	_, err = other.Shell(ctx, session.Command{Script: `true`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "inspect", commands(t, env)[0])
	assert.NotContains(t, commands(t, env), "start")

	// s paused it, and another resumed it: s's pause stops it again.
	require.NoError(t, s.Pause(ctx))
	assert.Equal(t, "Stopped", sandboxStatus(t, env, s.Name()))

	// With auto-resume, a call on a state learned stale resumes: a start of
	// a running sandbox changes nothing.
	require.NoError(t, third.Resume(ctx))
	other.SetAutoResume(true)
	require.NoError(t, other.Pause(ctx))
	require.NoError(t, third.Resume(ctx))
	_, err = other.Shell(ctx, session.Command{Script: `true`}, session.ShellOptions{})
	require.NoError(t, err)
}

// A pause or resume of a session whose sandbox was removed elsewhere says
// it is gone; a closed session refuses both.
func TestPauseGoneAndClosed(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	s, err := microvm.Create(ctx, options(env))
	require.NoError(t, err)
	_, _, code := env.Run(t, "remove", "--force", s.Name())
	require.Zero(t, code)
	assert.ErrorIs(t, s.Pause(ctx), session.ErrGone)
	_, err = s.Stats(ctx)
	assert.ErrorIs(t, err, session.ErrGone)
	require.NoError(t, s.Close(ctx))
	assert.ErrorIs(t, s.Pause(ctx), session.ErrClosed)
	assert.ErrorIs(t, s.Resume(ctx), session.ErrClosed)
	assert.False(t, errors.Is(s.Resume(ctx), session.ErrPaused))
}

// The idle timeout reaches msb create; a bad one is refused before msb runs.
func TestIdleTimeoutOption(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	o := options(env)
	o.IdleTimeout = "30m"
	createSession(t, o)
	assert.Contains(t, argvs(t, env)[0], "--idle-timeout")
	assert.Subset(t, argvs(t, env)[0], []string{"--idle-timeout", "30m"})

	env.ResetLog(t)
	o.IdleTimeout, o.SessionID = "1d", "other"
	_, err := microvm.Create(ctx, o)
	assert.ErrorIs(t, err, session.ErrInvalid)
	assert.ErrorContains(t, err, "idle timeout")
	assert.Empty(t, argvs(t, env))
}
