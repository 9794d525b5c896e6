package microvm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

func shellOut(t *testing.T, s *microvm.Session, script string, args ...string) string {
	t.Helper()
	res, err := s.Shell(context.Background(), session.Command{Script: script, Args: args}, session.ShellOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, string(res.Stderr))
	return string(res.Stdout)
}

func volumePath(t *testing.T, env *fakemsbtest.Env, volume string) string {
	t.Helper()
	text, err := msb.NewClient(&msb.CLI{Path: env.Bin}).VolumeInspect(context.Background(), volume)
	require.NoError(t, err)
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "Path:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Path in %q", text)
	return ""
}

// Write, fork (the source is stopped for the copy and started again), then
// change the file differently in both: each sees only its own change. The
// fork names its parent; a guest symlink to a host path is copied as a
// link; closing the source leaves the fork working; nothing is left after
// both close.
func TestForkDiverges(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	secret := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("host secret"), 0o600))
	src, err := microvm.Create(ctx, options(env))
	require.NoError(t, err)
	shellOut(t, src, `mkdir -p d && printf base >d/note.txt && ln -s "$1" leak`, secret)

	env.ResetLog(t)
	o := options(env)
	o.SessionID = "fork"
	fork, err := src.Fork(ctx, o)
	require.NoError(t, err)
	cmds := commands(t, env)
	require.Equal(t, []string{"inspect", "stop", "volume"}, cmds[:3], "inspect, stop, then the source's volume")
	assert.Equal(t, "start", cmds[len(cmds)-1], "the running source is started again")
	assert.Equal(t, "Running", sandboxStatus(t, env, src.Names().Sandbox))
	assert.NotEqual(t, src.Names(), fork.Names())

	info, err := msb.NewClient(&msb.CLI{Path: env.Bin}).Inspect(ctx, fork.Names().Sandbox)
	require.NoError(t, err)
	assert.Equal(t, src.Names().Sandbox, info.Labels[session.LabelParent])
	assert.Equal(t, "Workspace 42", info.Labels[session.LabelWorkspaceID])

	link := filepath.Join(volumePath(t, env, fork.Names().Volume), "leak")
	target, err := os.Readlink(link)
	require.NoError(t, err, "the guest's symlink is copied as a link")
	assert.Equal(t, secret, target)

	shellOut(t, src, `printf ' src' >>d/note.txt`)
	shellOut(t, fork, `printf ' fork' >>d/note.txt`)
	assert.Equal(t, "base src", shellOut(t, src, `cat d/note.txt`))
	assert.Equal(t, "base fork", shellOut(t, fork, `cat d/note.txt`))

	require.NoError(t, src.Close(ctx))
	assert.Equal(t, "base fork", shellOut(t, fork, `cat d/note.txt`))
	require.NoError(t, fork.Close(ctx))
	list, err := msb.NewClient(&msb.CLI{Path: env.Bin}).List(ctx, msb.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, list, "sandboxes left")
	vols, err := msb.NewClient(&msb.CLI{Path: env.Bin}).VolumeList(ctx)
	require.NoError(t, err)
	assert.Empty(t, vols, "volumes left")
	data, err := os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "host secret", string(data))
}

// A paused source stays paused after the fork; the fork runs.
func TestForkOfPausedSourceStaysPaused(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	src, err := microvm.Create(ctx, options(env))
	require.NoError(t, err)
	defer src.Close(ctx)
	shellOut(t, src, `echo kept >note.txt`)
	require.NoError(t, src.Pause(ctx))
	o := options(env)
	o.SessionID = "fork"
	fork, err := src.Fork(ctx, o)
	require.NoError(t, err)
	defer fork.Close(ctx)
	assert.Equal(t, "Stopped", sandboxStatus(t, env, src.Names().Sandbox))
	assert.Equal(t, "kept\n", shellOut(t, fork, `cat note.txt`))
}

// Bad input changes nothing: no session id, or a closed source.
func TestForkRefusals(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	src, err := microvm.Create(ctx, options(env))
	require.NoError(t, err)
	env.ResetLog(t)
	o := options(env)
	o.SessionID = ""
	_, err = src.Fork(ctx, o)
	require.ErrorIs(t, err, session.ErrInvalid)
	assert.Empty(t, commands(t, env))
	require.NoError(t, src.Close(ctx))
	o.SessionID = "fork"
	_, err = src.Fork(ctx, o)
	require.ErrorIs(t, err, session.ErrClosed)
}

// A workspace volume that is not a dir volume (no host directory to copy
// from) is refused clearly; the source, running before, runs again and no
// fork is left behind.
func TestForkRefusesADiskVolume(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	client := msb.NewClient(&msb.CLI{Path: env.Bin})
	names := session.NewNames("", "ws", "disk", fixedNow, 7)
	require.NoError(t, client.VolumeCreate(ctx, msb.VolumeCreateOptions{Name: names.Volume, Kind: "disk", Size: "64M"}))
	require.NoError(t, client.Create(ctx, msb.CreateOptions{Image: "debian", Name: names.Sandbox,
		Mounts: []msb.NamedMount{{Volume: names.Volume, Guest: "/workspace"}}, Quiet: true}))
	src, err := microvm.Attach(client, "", names.Sandbox)
	require.NoError(t, err)
	o := options(env)
	o.SessionID = "fork"
	_, err = src.Fork(ctx, o)
	require.ErrorIs(t, err, session.ErrInvalid)
	assert.ErrorContains(t, err, `volume `+names.Volume+` is of kind "disk"; only a dir volume`)
	assert.Equal(t, "Running", sandboxStatus(t, env, names.Sandbox))
	list, err := client.List(ctx, msb.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, list, 1, "no fork left")
	require.NoError(t, src.Close(ctx))
}

// A caller that gives up while the fork's volume is looked up (the source
// is stopped, the fork created): the fork is closed and the running source
// started again, neither with the cancelled context.
func TestForkCancelledMidCopy(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	src, err := microvm.Create(ctx, options(env))
	require.NoError(t, err)
	defer src.Close(ctx)
	shellOut(t, src, `echo kept >note.txt`)

	env.SetKnob("FAKEMSB_FAULTS", "volume-inspect#2=hang")
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(time.Second); cancel() }()
	o := options(env)
	o.SessionID = "fork"
	fork, err := src.Fork(cctx, o)
	require.Error(t, err)
	assert.Nil(t, fork)
	env.SetKnob("FAKEMSB_FAULTS", "")
	assert.Equal(t, []string{src.Name()}, env.Sandboxes(t), "the fork is removed")
	assert.Equal(t, []string{src.Names().Volume}, env.Volumes(t), "and its volume")
	assert.Equal(t, "Running", sandboxStatus(t, env, src.Name()), "the source is started again")
	assert.Equal(t, "kept\n", shellOut(t, src, `cat note.txt`))
}
