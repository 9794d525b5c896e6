package microvm_test

import (
	"context"
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

func shellOut(t *testing.T, s *microvm.Session, script string, args ...string) string {
	t.Helper()
	res, err := s.Shell(context.Background(), session.Command{Script: script, Args: args}, session.ShellOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, string(res.Stderr))
	return string(res.Stdout)
}

// forkOptions are the options of a fork of a session made with options.
func forkOptions(env *fakemsbtest.Env) microvm.Options {
	o := options(env)
	o.SessionID = "fork"
	return o
}

// sourceWithNote is a running session, closed when the test ends, whose
// workspace holds note.txt ("kept").
func sourceWithNote(t *testing.T, env *fakemsbtest.Env) *microvm.Session {
	t.Helper()
	src := createSession(t, options(env))
	shellOut(t, src, `echo kept >note.txt`)
	return src
}

// assertSourceAlone checks that a failed fork left nothing behind: the
// source's sandbox and volume are all there is, no snapshot is kept, and
// the source runs again with its workspace as it was.
func assertSourceAlone(t *testing.T, env *fakemsbtest.Env, src *microvm.Session, msgAndArgs ...any) {
	t.Helper()
	assert.Equal(t, []string{src.Name()}, env.Sandboxes(t), msgAndArgs...)
	assert.Equal(t, []string{src.Names().Volume}, env.Volumes(t), msgAndArgs...)
	assert.Empty(t, env.Snapshots(t), msgAndArgs...)
	assert.Equal(t, "Running", sandboxStatus(t, env, src.Name()), msgAndArgs...)
	assert.Equal(t, "kept\n", shellOut(t, src, `cat note.txt`), msgAndArgs...)
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
	fork, err := src.Fork(ctx, forkOptions(env))
	require.NoError(t, err)
	cmds := commands(t, env)
	require.Equal(t, []string{"inspect", "stop", "volume", "snapshot", "create"}, cmds[:5],
		"inspect, stop, the source's volume, its root disk snapshotted, the fork created")
	assert.Equal(t, "start", cmds[len(cmds)-1], "the running source is started again")
	snap := argvs(t, env)[3]
	require.Equal(t, []string{"snapshot", "create"}, snap[:2])
	stem, ok := session.SnapshotStem("", snap[2])
	assert.True(t, ok, "the snapshot's name %q is of our grammar", snap[2])
	assert.Equal(t, src.Names().Sandbox, snap[4], "--from the source")
	assert.Contains(t, snap, session.LabelParent+"="+src.Names().Sandbox)
	create := argvs(t, env)[4]
	assert.Equal(t, "--conf", create[1], "the fork boots from the snapshot, named in a conf file: %q", create)
	assert.NotContains(t, create, "--root-disk", "the snapshot is the root disk: the real msb refuses --root-disk beside it")
	removed := slices.IndexFunc(argvs(t, env), func(a []string) bool {
		return slices.Equal(a, []string{"snapshot", "remove", session.SnapshotName(stem)})
	})
	assert.Greater(t, removed, 4, "the snapshot is removed once the fork is made")
	copied := slices.IndexFunc(argvs(t, env), func(a []string) bool {
		return slices.Equal(a, []string{"volume", "inspect", fork.Names().Volume})
	})
	assert.Less(t, removed, copied, "before the workspace is copied")
	assert.Empty(t, env.Snapshots(t), "no snapshot is kept")
	_, err = os.Stat(create[2])
	assert.ErrorIs(t, err, os.ErrNotExist, "the conf file is removed")
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
	snaps, err := msb.NewClient(&msb.CLI{Path: env.Bin}).SnapshotList(ctx)
	require.NoError(t, err)
	assert.Empty(t, snaps, "snapshots left")
	data, err := os.ReadFile(secret)
	require.NoError(t, err)
	assert.Equal(t, "host secret", string(data))
}

// The fork boots from a snapshot of the source's root disk: a file msb
// placed there (the source's --copy-file) is in the fork, which was not
// created with it, and stays after the source and the snapshot are gone.
// The snapshot pins the image: a fork that names another is refused
// before anything is touched.
func TestForkCarriesTheRootDisk(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	client := msb.NewClient(&msb.CLI{Path: env.Bin})
	marker := filepath.Join(t.TempDir(), "marker")
	require.NoError(t, os.WriteFile(marker, []byte("root disk"), 0o644))
	names := session.NewNames("", "ws", "rootdisk", fixedNow, 7)
	require.NoError(t, client.Create(ctx, msb.CreateOptions{Image: "debian", Name: names.Sandbox, Quiet: true,
		Mounts:    []msb.NamedMount{{Volume: names.Volume, Guest: "/workspace"}},
		CopyFiles: []msb.CopyFile{{Src: marker, Dst: "/.oma-sandbox/marker"}, {Src: agenttest.AgentBinary(t), Dst: "/.oma-sandbox/agent"}}}))
	src, err := microvm.Attach(client, "", names.Sandbox)
	require.NoError(t, err)

	env.ResetLog(t)
	o := forkOptions(env)
	o.Image = "alpine"
	_, err = src.Fork(ctx, o)
	require.ErrorIs(t, err, session.ErrInvalid)
	assert.ErrorContains(t, err, `a fork boots from a snapshot of its source, whose image is "debian"`)
	assert.Equal(t, []string{"inspect"}, commands(t, env), "nothing but the inspect")

	o.Image = ""
	fork, err := src.Fork(ctx, o)
	require.NoError(t, err)
	info, err := client.Inspect(ctx, fork.Names().Sandbox)
	require.NoError(t, err)
	assert.Empty(t, info.CopyFiles, "the fork's own create placed nothing")
	assert.Equal(t, session.AgentInherited, info.Labels[session.LabelAgent], "it says its disk has the agent")
	assert.Equal(t, "debian", info.Image)
	require.NoError(t, src.Close(ctx))
	assert.Empty(t, env.Snapshots(t))
	res, err := fork.Shell(ctx, session.Command{Script: `cat /.oma-sandbox/marker`}, session.ShellOptions{User: "0"})
	require.NoError(t, err)
	assert.Equal(t, "root disk", string(res.Stdout), string(res.Stderr))
	require.NoError(t, fork.Close(ctx))
}

// A fork whose create fails leaves nothing: no fork, no volume, no
// snapshot; the source runs again as it was.
func TestFailedForkLeavesNothing(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	src := sourceWithNote(t, env)
	env.SetKnob("FAKEMSB_FAULTS", "create=exit:1:error: failed to start \"x\"")
	fork, err := src.Fork(ctx, forkOptions(env))
	require.Error(t, err)
	assert.Nil(t, fork)
	env.SetKnob("FAKEMSB_FAULTS", "")
	assertSourceAlone(t, env, src)
}

// A snapshot that fails (msb refuses, or the caller gives up while msb
// copies the disk) leaves nothing and names the step; the source runs
// again as it was.
func TestForkSnapshotFails(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	src := sourceWithNote(t, env)
	for _, fault := range []string{"snapshot-create=exit:1:error: io error: No space left on device (os error 28)", "snapshot-create=hang"} {
		env.SetKnob("FAKEMSB_FAULTS", fault)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		o := options(env)
		o.SessionID = "fork"
		fork, err := src.Fork(cctx, o)
		cancel()
		require.Error(t, err, fault)
		assert.Nil(t, fork)
		assert.ErrorContains(t, err, "snapshot the root disk", fault)
		env.SetKnob("FAKEMSB_FAULTS", "")
		assertSourceAlone(t, env, src, fault)
	}
}

// A paused source stays paused after the fork; the fork runs.
func TestForkOfPausedSourceStaysPaused(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	src := sourceWithNote(t, env)
	require.NoError(t, src.Pause(ctx))
	fork, err := src.Fork(ctx, forkOptions(env))
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
		Mounts:    []msb.NamedMount{{Volume: names.Volume, Guest: "/workspace"}},
		CopyFiles: []msb.CopyFile{{Src: agenttest.AgentBinary(t), Dst: "/.oma-sandbox/agent"}}, Quiet: true}))
	src, err := microvm.Attach(client, "", names.Sandbox)
	require.NoError(t, err)
	_, err = src.Fork(ctx, forkOptions(env))
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
	src := sourceWithNote(t, env)

	env.SetKnob("FAKEMSB_FAULTS", "volume-inspect#2=hang")
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(time.Second); cancel() }()
	fork, err := src.Fork(cctx, forkOptions(env))
	require.Error(t, err)
	assert.Nil(t, fork)
	env.SetKnob("FAKEMSB_FAULTS", "")
	assertSourceAlone(t, env, src)
}

// A sandbox without the agent (made by other means) has no fork: its disk
// would be the fork's, and no tool call could run there. Nothing but the
// inspect is asked of msb.
func TestForkWithoutAgentIsRefused(t *testing.T) {
	env := fakemsbtest.New(t)
	src := bareSandbox(t, env)
	env.ResetLog(t)
	_, err := src.Fork(context.Background(), forkOptions(env))
	require.ErrorIs(t, err, session.ErrNoAgent)
	assert.ErrorContains(t, err, src.Name())
	assert.Equal(t, []string{"inspect"}, commands(t, env))
	assert.Empty(t, env.Snapshots(t))
}
