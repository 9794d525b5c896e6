package microvm_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// channelOptions places agent (a real agent when "") in the sandbox, with
// a private agent cache.
func channelOptions(t *testing.T, env *fakemsbtest.Env, agent string) microvm.Options {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	o := options(env)
	o.NoChannel = false
	o.AgentFile = agent
	if agent == "" {
		o.AgentFile = agenttest.AgentBinary(t)
	}
	return o
}

// fakeAgent writes a shell script that stands in for the agent.
// fakeAgent is an agent whose channel (serve) runs script, and whose
// builtins are the real agent's, carried after the script (fakemsb's
// guests do not see the host's /tmp): the session's create, whose prepare
// is a builtin, works as with any agent.
func fakeAgent(t *testing.T, script string) string {
	real, err := os.ReadFile(agenttest.AgentBinary(t))
	require.NoError(t, err)
	head := fmt.Sprintf(`#!/bin/sh
if [ "$1" = builtin ]; then
  real=$(mktemp) && tail -c %d "$0" > "$real" && chmod +x "$real" && exec "$real" "$@"
  exit 126
fi
%s
exit
`, len(real), script)
	p := filepath.Join(t.TempDir(), "agent")
	require.NoError(t, os.WriteFile(p, append([]byte(head), real...), 0o755))
	return p
}

func sh(t *testing.T, s *microvm.Session, script string) string {
	t.Helper()
	res, err := s.Shell(context.Background(), session.Command{Script: script}, session.ShellOptions{})
	require.NoError(t, err, script)
	require.Equal(t, 0, res.ExitCode, "%s: %s", script, res.Stderr)
	return string(res.Stdout)
}

// channelEvents gives s instruments on a manual reader and returns a
// func that reads s's channel events back, by event.
func channelEvents(t *testing.T, s *microvm.Session) func() map[string]int64 {
	reader := sdkmetric.NewManualReader()
	s.Measure(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	return func() map[string]int64 {
		return testutil.SumsBy(t, reader, agentchan.ChannelEventsMetric, "oma.event")
	}
}

// awaitNoChannel waits until no process of sandbox's channel runs.
func awaitNoChannel(t *testing.T, env *fakemsbtest.Env, sandbox string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !env.Channel(sandbox).Empty() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.True(t, env.Channel(sandbox).Empty(), "channel processes left: %+v", env.Channel(sandbox))
}

// TestChannelBudget: create stays at two msb invocations and places the
// agent; the first call opens the channel (inspect + exec --stream) and no
// call costs another invocation. Close leaves nothing running.
func TestChannelBudget(t *testing.T) {
	env := fakemsbtest.New(t)
	s := createSession(t, channelOptions(t, env, ""))

	calls := argvs(t, env)
	require.Len(t, calls, 2, "create + one prepare exec")
	i := slices.Index(calls[0], "--copy-file")
	require.Positive(t, i, "create places the agent")
	src, dst, _ := strings.Cut(calls[0][i+1], ":/")
	assert.Equal(t, ".oma-sandbox/agent", dst)
	fi, err := os.Stat(src)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	assert.Equal(t, "exec", calls[1][0], "the prepare exec runs without the channel")

	env.ResetLog(t)
	const n = 5
	for i := range n {
		assert.Equal(t, strconv.Itoa(i)+"\n", sh(t, s, "echo "+strconv.Itoa(i)))
	}
	calls = argvs(t, env)
	require.Len(t, calls, 2, "%d calls over the channel: inspect + exec --stream, then nothing: %q", n, calls)
	assert.Equal(t, "inspect", calls[0][0])
	assert.Equal(t, []string{"exec", "--stream", "--user", "0", s.Name(), "--", "/.oma-sandbox/agent", "serve", "--default-user", "65534:65534"}, calls[1])
	procs := env.Channel(s.Name())
	assert.Len(t, procs.Msb, 1)
	assert.Len(t, procs.Agents, 1)

	require.NoError(t, s.Close(context.Background()))
	awaitNoChannel(t, env, s.Name())
}

// TestChannelCacheReuseAndRepair: the cached agent is reused while it
// verifies, and replaced when someone changed it.
func TestChannelCacheReuseAndRepair(t *testing.T) {
	env := fakemsbtest.New(t)
	o := channelOptions(t, env, fakeAgent(t, "exit 127"))
	createAndClose := func(id string) {
		t.Helper()
		o.SessionID = id
		s, err := microvm.Create(context.Background(), o)
		require.NoError(t, err)
		require.NoError(t, s.Close(context.Background()))
	}
	createAndClose(o.SessionID)
	calls := argvs(t, env)
	src, _, _ := strings.Cut(calls[0][slices.Index(calls[0], "--copy-file")+1], ":/")
	before, err := os.Stat(src)
	require.NoError(t, err)
	dir := filepath.Dir(src)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the cache is private")

	createAndClose("second")
	after, err := os.Stat(src)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "a verified copy is reused")

	require.NoError(t, os.WriteFile(src, []byte("#!/bin/sh\necho tampered\n"), 0o755))
	createAndClose("third")
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	original, err := os.ReadFile(o.AgentFile)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(original, data), "a changed copy is replaced")

	// A symlink planted at the copy's name is never followed, and replaced.
	target := filepath.Join(t.TempDir(), "elsewhere")
	require.NoError(t, os.WriteFile(target, []byte("keep me"), 0o755))
	require.NoError(t, os.Remove(src))
	require.NoError(t, os.Symlink(target, src))
	createAndClose("symlinked")
	fi, err = os.Lstat(src)
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "the symlink was replaced by a copy")
	data, err = os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(data), "its target untouched")

	// An open cache places no agent, and so there is no session.
	require.NoError(t, os.Chmod(dir, 0o777))
	env.ResetLog(t)
	o.SessionID = "fourth"
	_, err = microvm.Create(context.Background(), o)
	require.ErrorContains(t, err, "it must be closed to group and others")
	assert.Empty(t, argvs(t, env), "msb was not asked for anything")
}

// TestChannelFallback: a sandbox without the agent (made by other means),
// an agent that fails at once, and one that never says hello all leave
// the session on one msb exec per call, quickly.
func TestChannelFallback(t *testing.T) {
	defer microvm.SetHelloTimeout(500 * time.Millisecond)()
	for _, c := range []struct {
		name, agent string
		noAgent     bool
		wantOpen    []string // msb subcommands the first call costs
	}{
		{name: "no agent", noAgent: true, wantOpen: []string{"inspect", "exec"}},
		{name: "agent exits 127", agent: "exit 127", wantOpen: []string{"inspect", "exec", "exec"}},
		{name: "agent stays silent", agent: "exec sleep 300", wantOpen: []string{"inspect", "exec", "exec"}},
		{name: "agent speaks another version", agent: `echo '{"type":"hello","version":9,"pid":1}'; exec sleep 300`, wantOpen: []string{"inspect", "exec", "exec"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := fakemsbtest.New(t)
			o := channelOptions(t, env, "")
			if c.agent != "" {
				o.AgentFile = fakeAgent(t, c.agent)
			}
			// Attached: a session object that does not know whether the
			// sandbox has the agent.
			var s *microvm.Session
			if c.noAgent {
				s = bareSandbox(t, env)
			} else {
				var err error
				s, err = microvm.Attach(o.Client, "", createSession(t, o).Name())
				require.NoError(t, err)
			}
			events := channelEvents(t, s)
			env.ResetLog(t)
			start := time.Now()
			assert.Equal(t, "hi\n", sh(t, s, "echo hi"))
			assert.Less(t, time.Since(start), 4*time.Second)
			assert.Equal(t, c.wantOpen, commands(t, env))
			awaitNoChannel(t, env, s.Name())
			env.ResetLog(t)
			assert.Equal(t, "hi\n", sh(t, s, "echo hi"))
			assert.Equal(t, []string{"exec"}, commands(t, env), "then one exec per call")
			assert.Equal(t, map[string]int64{"open_failed": 1, "fell_back": 1}, events())
		})
	}
}

// TestChannelDeath: a channel that dies under a call (its agent or its msb
// exec killed, garbage on the wire, the sandbox stopped) fails the call at
// once with ErrChannelBroken; the next call reopens it once, and a second
// death leaves the session on one msb exec per call. Nothing is left
// running.
func TestChannelDeath(t *testing.T) {
	killAgent := func(t *testing.T, env *fakemsbtest.Env, s *microvm.Session) {
		require.Equal(t, 1, env.KillChannel(s.Name(), true))
	}
	killMsb := func(t *testing.T, env *fakemsbtest.Env, s *microvm.Session) {
		require.Equal(t, 1, env.KillChannel(s.Name(), false))
	}
	stopSandbox := func(t *testing.T, env *fakemsbtest.Env, s *microvm.Session) {
		_, stderr, code := env.Run(t, "stop", "--force", s.Name())
		require.Equal(t, 0, code, stderr)
	}
	removeSandbox := func(t *testing.T, env *fakemsbtest.Env, s *microvm.Session) {
		_, stderr, code := env.Run(t, "remove", "--force", s.Name())
		require.Equal(t, 0, code, stderr)
	}
	for _, c := range []struct {
		name  string
		agent string // "" for the real agent
		kill  func(t *testing.T, env *fakemsbtest.Env, s *microvm.Session)
	}{
		{name: "agent killed", kill: killAgent},
		{name: "msb exec killed", kill: killMsb},
		{name: "sandbox stopped", kill: stopSandbox},
		// Removed outside this process: gone, as the exec path says.
		{name: "sandbox removed", kill: removeSandbox},
		// Says hello, then answers the first frame with garbage.
		{name: "garbage", agent: `echo '{"type":"hello","version":1,"pid":1}'; read -r line; echo 'garbage'; exec sleep 300`},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := fakemsbtest.New(t)
			o := channelOptions(t, env, "")
			if c.agent != "" {
				o.AgentFile = fakeAgent(t, c.agent)
			}
			s := createSession(t, o)
			events := channelEvents(t, s)

			call := func() error {
				done := make(chan error, 1)
				go func() {
					_, err := s.Shell(context.Background(), session.Command{Script: `sleep 30`}, session.ShellOptions{})
					done <- err
				}()
				if c.kill != nil {
					deadline := time.Now().Add(5 * time.Second)
					for len(env.Channel(s.Name()).Agents) == 0 && time.Now().Before(deadline) {
						time.Sleep(10 * time.Millisecond)
					}
					time.Sleep(100 * time.Millisecond) // the call is in flight
					c.kill(t, env, s)
				}
				select {
				case err := <-done:
					return err
				case <-time.After(10 * time.Second):
					t.Fatal("the call hangs on a dead channel")
					return nil
				}
			}
			err := call()
			if c.name == "sandbox removed" {
				require.ErrorIs(t, err, session.ErrGone)
				awaitNoChannel(t, env, s.Name())
				_, err = s.Shell(context.Background(), session.Command{Script: `true`}, session.ShellOptions{})
				require.ErrorIs(t, err, session.ErrGone, "the next call")
				assert.False(t, s.Poisoned())
				return
			}
			require.ErrorIs(t, err, session.ErrChannelBroken, "first death")
			if c.name == "sandbox stopped" {
				// The next call finds it stopped: no long-lived exec would
				// keep it running, so the session goes back to one exec per
				// call, which msb's own rules then govern.
				awaitNoChannel(t, env, s.Name())
				env.ResetLog(t)
				_, _ = s.Shell(context.Background(), session.Command{Script: `true`}, session.ShellOptions{})
				assert.NotContains(t, argvs(t, env), []string{"exec", "--stream"}, "no channel on a stopped sandbox")
				return
			}
			env.ResetLog(t)
			err = call()
			require.ErrorIs(t, err, session.ErrChannelBroken, "second death, after one reopen")
			assert.Equal(t, []string{"inspect", "exec", "inspect"}, commands(t, env), "one reopen, and one inspect when it died (was the sandbox removed?)")
			awaitNoChannel(t, env, s.Name())

			env.ResetLog(t)
			assert.Equal(t, "after\n", sh(t, s, "echo after"))
			assert.Equal(t, []string{"exec"}, commands(t, env), "then one exec per call")
			assert.Nil(t, env.Channel(s.Name()).Msb)
			assert.Equal(t, map[string]int64{"opened": 2, "died": 2, "fell_back": 1}, events())

			if c.agent != "" {
				return
			}
			// A call naming a builtin runs it by one exec of the agent.
			env.ResetLog(t)
			assert.Equal(t, `0 "MARK\x00"`, globCall(t, s, ""))
			assert.Equal(t, []string{"/.oma-sandbox/agent"}, execArgv0s(t, env, 0))
		})
	}
}

// TestChannelDeathAsksOnce: a channel that dies with calls in flight asks
// msb once whether its sandbox is gone, however many calls it failed.
func TestChannelDeathAsksOnce(t *testing.T) {
	env := fakemsbtest.New(t)
	s := createSession(t, channelOptions(t, env, ""))
	sh(t, s, "true")
	const calls = 4
	done := make(chan error, calls)
	for range calls {
		go func() {
			_, err := s.Shell(context.Background(), session.Command{Script: `sleep 30`}, session.ShellOptions{})
			done <- err
		}()
	}
	time.Sleep(300 * time.Millisecond) // the calls are in flight
	inspects := func() int {
		n := 0
		for _, c := range commands(t, env) {
			if c == "inspect" {
				n++
			}
		}
		return n
	}
	before := inspects()
	_, stderr, code := env.Run(t, "remove", "--force", s.Name())
	require.Equal(t, 0, code, stderr)
	for range calls {
		select {
		case err := <-done:
			require.ErrorIs(t, err, session.ErrGone)
		case <-time.After(10 * time.Second):
			t.Fatal("a call hangs on a dead channel")
		}
	}
	awaitNoChannel(t, env, s.Name())
	assert.Equal(t, 1, inspects()-before, "inspects after the channel died: %v", commands(t, env))
}

// TestChannelLifecycle: Pause, Poison and Close end the channel and what
// ran on it; a call after a pause resumes the sandbox and reopens it.
func TestChannelLifecycle(t *testing.T) {
	env := fakemsbtest.New(t)
	s := createSession(t, channelOptions(t, env, ""))
	ctx := context.Background()

	sh(t, s, "true")
	require.False(t, env.Channel(s.Name()).Empty())
	require.NoError(t, s.Pause(ctx))
	awaitNoChannel(t, env, s.Name())

	for range 3 { // a pause is no death: the channel reopens after each
		env.ResetLog(t)
		assert.Equal(t, "back\n", sh(t, s, "echo back"))
		assert.Equal(t, []string{"start", "exec"}, commands(t, env), "resume, then reopen with what the first inspect said")
		require.Len(t, env.Channel(s.Name()).Msb, 1)
		require.NoError(t, s.Pause(ctx))
		awaitNoChannel(t, env, s.Name())
	}
	sh(t, s, "true")

	// A call in flight when the session is poisoned ends with the channel.
	done := make(chan error, 1)
	go func() {
		_, err := s.Shell(ctx, session.Command{Script: `sleep 30`}, session.ShellOptions{})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	perr := s.Poison(ctx, nil)
	require.ErrorIs(t, perr, session.ErrPoisoned)
	select {
	case err := <-done:
		assert.ErrorIs(t, err, session.ErrChannelBroken)
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight hangs after Poison")
	}
	awaitNoChannel(t, env, s.Name())
	require.NoError(t, s.Close(ctx))
	awaitNoChannel(t, env, s.Name())
}

// TestChannelResumeAttached: an attached session learns what the channel
// needs from the first inspect it makes, the lifecycle's included, and
// reopens without another after its own start; a session that never
// inspected asks msb once.
func TestChannelResumeAttached(t *testing.T) {
	env := fakemsbtest.New(t)
	o := channelOptions(t, env, "")
	o.IdleTimeout = "1h"
	created := createSession(t, o)
	created.DisableAgentChannel()
	stop := func() {
		t.Helper()
		_, stderr, code := env.Run(t, "stop", created.Name())
		require.Equal(t, 0, code, stderr)
	}

	// Without auto-resume, Resume asks msb whether the sandbox runs.
	stop()
	s, err := microvm.Attach(o.Client, "", created.Name())
	require.NoError(t, err)
	s.SetAutoResume(false)
	env.ResetLog(t)
	require.NoError(t, s.Resume(context.Background()))
	assert.Equal(t, "back\n", sh(t, s, "echo back"))
	assert.Equal(t, []string{"inspect", "start", "exec"}, commands(t, env), "the resume's inspect serves the open")
	assert.Equal(t, 30*time.Minute, microvm.ChannelQuiet(s), "and gives the idle timeout")
	require.Len(t, env.Channel(s.Name()).Msb, 1)
	s.DisableAgentChannel()
	awaitNoChannel(t, env, s.Name())

	// Paused by a session that never asked msb about the sandbox.
	other, err := microvm.Attach(o.Client, "", created.Name())
	require.NoError(t, err)
	require.NoError(t, other.Pause(context.Background()))
	env.ResetLog(t)
	assert.Equal(t, "back\n", sh(t, other, "echo back"))
	assert.Equal(t, []string{"start", "inspect", "exec"}, commands(t, env), "nothing known: one inspect")
	require.NoError(t, other.Pause(context.Background()))
	awaitNoChannel(t, env, other.Name())
	env.ResetLog(t)
	assert.Equal(t, "back\n", sh(t, other, "echo back"))
	assert.Equal(t, []string{"start", "exec"}, commands(t, env), "then known")
	other.DisableAgentChannel()
	awaitNoChannel(t, env, other.Name())
}

// TestChannelQuietClose: with an idle timeout, the channel closes after a
// quiet period (msb counts an open exec as activity, so the idle stop
// could never happen), and the next call reopens it.
func TestChannelQuietClose(t *testing.T) {
	env := fakemsbtest.New(t)
	o := channelOptions(t, env, "")
	o.IdleTimeout = "1s"
	s := createSession(t, o)

	sh(t, s, "true")
	require.False(t, env.Channel(s.Name()).Empty())
	awaitNoChannel(t, env, s.Name()) // half the idle timeout
	env.ResetLog(t)
	sh(t, s, "true")
	assert.Equal(t, []string{"inspect", "exec"}, commands(t, env), "reopened")

	// An attached session learns the idle timeout from inspect.
	s.DisableAgentChannel()
	awaitNoChannel(t, env, s.Name())
	other, err := microvm.Attach(o.Client, "", s.Name())
	require.NoError(t, err)
	sh(t, other, "true")
	require.Len(t, env.Channel(s.Name()).Msb, 1)
	awaitNoChannel(t, env, s.Name())
	require.NoError(t, other.Close(context.Background()))
}

// TestChannelBackgroundProcess: a bash call's background process outlives
// the call without holding it or the channel.
func TestChannelBackgroundProcess(t *testing.T) {
	env := fakemsbtest.New(t)
	s := createSession(t, channelOptions(t, env, ""))
	start := time.Now()
	sh(t, s, `sleep 300 >/dev/null 2>&1 </dev/null & echo $! > /tmp/bg.pid`)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, "alive\n", sh(t, s, `kill -0 "$(cat /tmp/bg.pid)" && echo alive`))
	res, err := s.Shell(context.Background(), session.Command{Script: "echo next"}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "next\n", string(res.Stdout))
}

// TestChannelClosedWhenPoisonCannotEndTheSandbox: Poison closes the
// channel itself, so it ends even when msb can neither stop nor remove the
// sandbox (whose end would take the channel with it).
func TestChannelClosedWhenPoisonCannotEndTheSandbox(t *testing.T) {
	env := fakemsbtest.New(t)
	s, err := microvm.Create(context.Background(), channelOptions(t, env, ""))
	require.NoError(t, err)
	sh(t, s, "true")
	require.Len(t, env.Channel(s.Name()).Msb, 1)
	env.SetKnob("FAKEMSB_FAULTS", "stop=exit:1:error: boom;remove=exit:1:error: boom")
	err = s.Poison(context.Background(), nil)
	require.ErrorIs(t, err, session.ErrPoisoned)
	require.ErrorContains(t, err, "the guest may still run")
	awaitNoChannel(t, env, s.Name())
	env.SetKnob("FAKEMSB_FAULTS", "")
	require.NoError(t, s.Close(context.Background()))
}

// TestChannelFork: a fork pauses its source, which closes the source's
// channel; the fork gets the agent too, and both then run calls over their
// own channels.
func TestChannelFork(t *testing.T) {
	env := fakemsbtest.New(t)
	o := channelOptions(t, env, "")
	src := createSession(t, o)
	sh(t, src, "echo shared > f.txt")
	require.Len(t, env.Channel(src.Name()).Msb, 1)

	fo := o
	fo.SessionID = "fork"
	fork, err := src.Fork(context.Background(), fo)
	require.NoError(t, err)
	defer fork.Close(context.Background())
	assert.True(t, env.Channel(src.Name()).Empty(), "the source's channel closed for the pause")

	assert.Equal(t, "shared\n", sh(t, fork, "cat f.txt"))
	assert.Equal(t, "shared\n", sh(t, src, "cat f.txt"))
	assert.Len(t, env.Channel(src.Name()).Msb, 1, "the source reopened its channel")
	assert.Len(t, env.Channel(fork.Name()).Msb, 1, "the fork has its own")
}

// execAndChannelSessions creates two sessions on one fakemsb: one that
// runs one msb exec per call and one over the guest agent's channel.
func execAndChannelSessions(t *testing.T) (env *fakemsbtest.Env, exec, channel *microvm.Session) {
	t.Helper()
	env = fakemsbtest.New(t)
	exec = createSession(t, options(env))
	o := channelOptions(t, env, "")
	o.SessionID = "channel"
	return env, exec, createSession(t, o)
}

// TestChannelWorkdirParity: a call gets the same outcome over the channel
// as over its own msb exec when the guest made its workdir unsearchable
// for the call's user. msb's agent changes into the workdir as root and
// only then becomes the call's user, so such a call starts (in a directory
// it cannot read) rather than failing.
func TestChannelWorkdirParity(t *testing.T) {
	env, exec, channel := execAndChannelSessions(t)
	asRoot := session.ShellOptions{User: "0"}
	const probe = `echo "in $PWD as $(id -u)"; ls . >/dev/null 2>&1 || echo unreadable >&2; exit 3`
	for _, c := range []struct {
		name, setup string
		opts        session.ShellOptions
	}{
		// The default user (the image's, who owns /workspace) locks itself out.
		{name: "workspace mode 000", setup: `chmod 000 /workspace`},
		{name: "root's private workdir", setup: `mkdir -p /srv/private && chmod 700 /srv/private`,
			opts: session.ShellOptions{Workdir: "/srv/private"}},
		{name: "workdir missing", opts: session.ShellOptions{Workdir: "/srv/missing"}},
		{name: "workdir is a file", setup: `touch /srv/file`, opts: session.ShellOptions{Workdir: "/srv/file"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			outcome := func(s *microvm.Session) string {
				t.Helper()
				if c.setup != "" {
					res, err := s.Shell(context.Background(), session.Command{Script: c.setup}, asRoot)
					require.NoError(t, err)
					require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
				}
				defer func() {
					_, _ = s.Shell(context.Background(), session.Command{Script: `chmod 755 /workspace`}, asRoot)
				}()
				res, err := s.Shell(context.Background(), session.Command{Script: probe}, c.opts)
				if err != nil {
					return "error: " + err.Error()
				}
				return fmt.Sprintf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			want := outcome(exec)
			assert.Equal(t, want, outcome(channel), "the channel's outcome, against one exec's")
			require.Len(t, env.Channel(channel.Name()).Agents, 1, "the call went over the channel")
		})
	}
}

// TestChannelBuiltins: a Command's builtin runs in the agent, over the
// channel or by one exec of its own; a builtin the channel's agent does
// not offer (an older agent's) fails with session.ErrNoAgent and runs
// nothing else.
func TestChannelBuiltins(t *testing.T) {
	env, exec, channel := execAndChannelSessions(t)
	run := func(s *microvm.Session, builtin string) (string, error) {
		t.Helper()
		res, err := s.Shell(context.Background(), session.Command{
			Args:    []string{"tok", "/workspace", "MARK", "0", "", ""},
			Builtin: builtin,
		}, session.ShellOptions{})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d %q", res.ExitCode, res.Stdout), nil
	}
	out, err := run(channel, agentwire.BuiltinGlobEnumerate)
	require.NoError(t, err)
	assert.Equal(t, `0 "MARK\x00"`, out, "an offered builtin, over the channel")
	_, err = run(channel, "not-offered")
	require.ErrorIs(t, err, session.ErrNoAgent, "a builtin the agent lacks")
	assert.Contains(t, err.Error(), `does not offer "not-offered"`)
	out, err = run(exec, agentwire.BuiltinGlobEnumerate)
	require.NoError(t, err)
	assert.Equal(t, `0 "MARK\x00"`, out, "one exec per call")
	require.Len(t, env.Channel(channel.Name()).Agents, 1, "the calls went over one channel")
	assert.Equal(t, microvm.Served{Channel: 1, Builtins: map[string]int{agentwire.BuiltinGlobEnumerate: 1}},
		channel.Served(), "the channel session's calls, as counted")
	assert.Equal(t, microvm.Served{Exec: 1, Builtins: map[string]int{agentwire.BuiltinGlobEnumerate: 1}}, exec.Served(), "the exec session's call, as counted")
}
