package microvm_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

var (
	lsCall    = session.Command{Builtin: agentwire.BuiltinLs, Args: []string{"/workspace", "."}}
	writeCall = session.Command{Builtin: agentwire.BuiltinWrite, Args: []string{"/workspace/f.txt", "", "/workspace", "f.txt"}}
)

// olderSession creates a session whose sandbox holds an agent older than
// this program (lacking ls and write), and makes this program's agent the
// bundled one, which an attached session replaces it with.
func olderSession(t *testing.T) (*fakemsbtest.Env, *microvm.Session) {
	env := fakemsbtest.New(t)
	s := createSession(t, channelOptions(t, env, agenttest.OlderAgentBinary(t)))
	current, err := os.ReadFile(agenttest.AgentBinary(t))
	require.NoError(t, err)
	t.Cleanup(microvm.WithBundledAgent(current))
	return env, s
}

// replacements are the msb invocations that replaced the agent: a copy to
// a staged path beside it, and one exec of the staged agent installing
// itself.
func replacements(t *testing.T, env *fakemsbtest.Env) [][]string {
	var out [][]string
	for _, argv := range argvs(t, env) {
		if argv[0] == "copy" || slices.Contains(argv, "install") {
			out = append(out, argv)
		}
	}
	return out
}

// attach attaches a session to sandbox, as another process would; without
// channel, its calls go by one exec each. Its channel ends with the test.
func attach(t *testing.T, env *fakemsbtest.Env, sandbox string, channel bool) *microvm.Session {
	t.Helper()
	a, err := microvm.Attach(options(env).Client, "", sandbox)
	require.NoError(t, err)
	t.Cleanup(a.DisableAgentChannel)
	if !channel {
		a.DisableAgentChannel()
	}
	return a
}

func requireReplacedOnce(t *testing.T, env *fakemsbtest.Env, sandbox string) {
	t.Helper()
	got := replacements(t, env)
	require.Len(t, got, 2, "%q", got)
	staged, ok := strings.CutPrefix(got[0][2], sandbox+":")
	require.True(t, ok, "%q", got[0])
	assert.True(t, strings.HasPrefix(staged, "/.oma-sandbox/agent.new-"), staged)
	assert.Equal(t, []string{staged, "install", staged, "/.oma-sandbox/agent"}, got[1][len(got[1])-4:])
}

// A session attached to a sandbox whose agent is older than this program
// (placed by an older oma-sandbox) replaces it with this program's on the
// channel's first open, once, and the builtins the older one lacked run;
// the session that placed the older agent does not replace it.
func TestAnOlderAgentIsReplacedOnTheChannel(t *testing.T) {
	env, older := olderSession(t)
	_, err := older.Shell(context.Background(), lsCall, session.ShellOptions{})
	require.ErrorIs(t, err, session.ErrNoAgent, "the creating session placed the agent it was given")
	assert.ErrorContains(t, err, `does not offer "ls"`)
	assert.Empty(t, replacements(t, env))

	a := attach(t, env, older.Name(), true)
	res, err := a.Shell(context.Background(), writeCall, session.ShellOptions{Stdin: strings.NewReader("body\n")})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	res, err = a.Shell(context.Background(), lsCall, session.ShellOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	assert.Contains(t, string(res.Stdout), "f.txt")
	assert.Equal(t, 2, a.Served().Channel, "both calls on the channel")
	requireReplacedOnce(t, env, a.Name())
	a.DisableAgentChannel()

	// The agent at the agent's path is the new one, for every later user.
	b := attach(t, env, older.Name(), false)
	res, err = b.Shell(context.Background(), lsCall, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	assert.Len(t, replacements(t, env), 2, "no second replacement")
	assert.Equal(t, "body\n", sh(t, older, "cat /workspace/f.txt"))
	assert.NotContains(t, sh(t, older, "ls -A /.oma-sandbox"), "agent.new-", "nothing staged is left")
}

// earlierRevisionSession creates a session whose sandbox holds an agent
// that offers every builtin but is of the revision before this program's
// (older than a fix of this program's agent).
func earlierRevisionSession(t *testing.T) (*fakemsbtest.Env, *microvm.Session, []byte) {
	env := fakemsbtest.New(t)
	s := createSession(t, channelOptions(t, env, agenttest.PreviousRevisionAgentBinary(t)))
	current, err := os.ReadFile(agenttest.AgentBinary(t))
	require.NoError(t, err)
	t.Cleanup(microvm.WithBundledAgent(current))
	sh(t, s, "true")
	assert.Empty(t, replacements(t, env), "the creating session placed the agent it was given")
	return env, s, current
}

// An agent of a lower revision is replaced by an attached session, on its
// channel (by the hello) and by one exec per call (the agent refuses the
// call that asks for this program's revision, which is then sent again).
func TestAnAgentOfAnEarlierRevisionIsReplaced(t *testing.T) {
	for _, channel := range []bool{true, false} {
		t.Run(map[bool]string{true: "channel", false: "exec"}[channel], func(t *testing.T) {
			env, older, current := earlierRevisionSession(t)
			a := attach(t, env, older.Name(), channel)
			events := channelEvents(t, a)
			res, err := a.Shell(context.Background(), writeCall, session.ShellOptions{Stdin: strings.NewReader("kept\n")})
			require.NoError(t, err)
			require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
			assert.Equal(t, "kept\n", sh(t, older, "cat /workspace/f.txt"))
			requireReplacedOnce(t, env, a.Name())
			assert.Equal(t, int64(1), events()[string(agentchan.Replaced)])
			file, err := env.GuestFile(older.Name(), fakemsbtest.AgentGuestPath)
			require.NoError(t, err)
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			assert.Equal(t, current, b, "this program's agent is in place")
		})
	}
}

// An agent of a lower revision that cannot be replaced still has every
// builtin: by one exec per call, the call refused for its revision is sent
// again without asking, and later calls no longer ask.
func TestAnAgentOfAnEarlierRevisionNotReplacedStillServes(t *testing.T) {
	env, older, _ := earlierRevisionSession(t)
	t.Cleanup(microvm.WithoutBundledAgent(false))
	a := attach(t, env, older.Name(), false)
	events := channelEvents(t, a)
	env.ResetLog(t)
	for range 2 {
		res, err := a.Shell(context.Background(), writeCall, session.ShellOptions{Stdin: strings.NewReader("as it is\n")})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	}
	assert.Equal(t, "as it is\n", sh(t, older, "cat /workspace/f.txt"))
	assert.Equal(t, int64(1), events()[string(agentchan.ReplaceFailed)])
	var asked []bool
	for _, argv := range argvs(t, env) {
		if slices.Contains(argv, agentwire.BuiltinWrite) {
			asked = append(asked, slices.Contains(argv, agentwire.RevisionOption()))
		}
	}
	assert.Equal(t, []bool{true, false, false}, asked, "asked, sent again without asking, then not asked")
}

// By one exec per call, a session attached to a sandbox whose agent is of
// this revision asks for the revision until the agent has answered once,
// then neither asks nor keeps a copy of the stdin to send again.
func TestACurrentAgentIsAskedItsRevisionOnce(t *testing.T) {
	env := fakemsbtest.New(t)
	s := createSession(t, channelOptions(t, env, agenttest.AgentBinary(t)))
	a := attach(t, env, s.Name(), false)
	env.ResetLog(t)
	for _, content := range []string{"one\n", "two\n", "three\n"} {
		res, err := a.Shell(context.Background(), writeCall, session.ShellOptions{Stdin: strings.NewReader(content)})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
		assert.Equal(t, content, sh(t, s, "cat /workspace/f.txt"))
	}
	var asked []bool
	for _, argv := range argvs(t, env) {
		if slices.Contains(argv, agentwire.BuiltinWrite) {
			asked = append(asked, slices.Contains(argv, agentwire.RevisionOption()))
		}
	}
	assert.Equal(t, []bool{true, false, false}, asked)
	assert.Empty(t, replacements(t, env))
}

// On the exec path (the one-shot CLI's), the older agent's answer to a
// builtin it lacks makes the session replace it and send the call again,
// with the same stdin; a call whose output streams gets the older agent's
// answer.
func TestAnOlderAgentIsReplacedOnTheExecPath(t *testing.T) {
	env, older := olderSession(t)
	a := attach(t, env, older.Name(), false)
	events := channelEvents(t, a)

	var streamed []byte
	res, err := a.Shell(context.Background(), lsCall, session.ShellOptions{Stderr: func(b []byte) { streamed = append(streamed, b...) }})
	require.NoError(t, err)
	assert.Equal(t, 2, res.ExitCode)
	assert.Equal(t, "oma-guest-agent: unknown builtin \"ls\"\n", string(streamed))
	assert.Empty(t, replacements(t, env), "a streamed call is not sent again")

	res, err = a.Shell(context.Background(), writeCall, session.ShellOptions{Stdin: strings.NewReader("sent twice\n")})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	assert.Equal(t, "sent twice\n", sh(t, older, "cat /workspace/f.txt"))
	requireReplacedOnce(t, env, a.Name())
	assert.Equal(t, map[string]int{agentwire.BuiltinLs: 1, agentwire.BuiltinWrite: 1}, a.Served().Builtins, "calls, each counted once")
	assert.Equal(t, map[string]int64{string(agentchan.Replaced): 1}, events())
}

// An older agent that cannot be replaced (this build has no agent for the
// guest) leaves its calls failing with session.ErrNoAgent, saying why, and
// is tried once.
func TestAnOlderAgentNotReplaced(t *testing.T) {
	env, older := olderSession(t)
	t.Cleanup(microvm.WithoutBundledAgent(false))
	for _, channel := range []bool{true, false} {
		a := attach(t, env, older.Name(), channel)
		events := channelEvents(t, a)
		for range 2 {
			_, err := a.Shell(context.Background(), lsCall, session.ShellOptions{})
			require.ErrorIs(t, err, session.ErrNoAgent, "channel %v", channel)
			assert.ErrorContains(t, err, `does not offer "ls"`)
			assert.ErrorContains(t, err, "cannot serve as its own: test: it cannot")
		}
		assert.Equal(t, int64(1), events()[string(agentchan.ReplaceFailed)], "channel %v", channel)
		a.DisableAgentChannel()
	}
	assert.Empty(t, replacements(t, env))
}

// A build without the bundled agent that serves as its own (this test
// binary stands in for one) replaces an older agent with itself: started
// at the staged path, it serves as the agent and installs itself.
func TestAnOlderAgentIsReplacedByTheProgramItself(t *testing.T) {
	env, older := olderSession(t)
	t.Cleanup(microvm.WithoutBundledAgent(true))
	a := attach(t, env, older.Name(), true)
	res, err := a.Shell(context.Background(), lsCall, session.ShellOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	requireReplacedOnce(t, env, a.Name())
	self, err := os.ReadFile("/proc/self/exe")
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(len(self))+"\n", sh(t, older, "stat -c %s /.oma-sandbox/agent"), "the program placed itself")
}

// A call cancelled while the agent is being replaced (msb copy hanging)
// fails, and leaves the replacement to the session's next call: the
// cancel is not taken for a replacement that failed.
func TestAnOlderAgentReplacementCancelled(t *testing.T) {
	env, older := olderSession(t)
	a := attach(t, env, older.Name(), false)
	env.SetKnob("FAKEMSB_FAULTS", "copy=hang")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := a.Shell(ctx, lsCall, session.ShellOptions{})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	env.SetKnob("FAKEMSB_FAULTS", "")

	res, err := a.Shell(context.Background(), lsCall, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
}

// Replacing the agent is setup of the session, like a create: a copy that
// takes longer than the session's operation timeout (msb copying the agent
// into an emulated VM took over 10 s) still replaces it.
func TestAnOlderAgentReplacementOutlastsTheOperationTimeout(t *testing.T) {
	env, older := olderSession(t)
	a := attach(t, env, older.Name(), false)
	microvm.SetOperationTimeout(a, time.Second)
	env.SetKnob("FAKEMSB_FAULTS", "copy=delay:1500ms")
	res, err := a.Shell(context.Background(), lsCall, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	requireReplacedOnce(t, env, a.Name())
}

// A call that meets the older agent while another call of the session is
// replacing it waits for that replacement only as long as its own context
// lets it.
func TestAnOlderAgentReplacementAwaitedWithinTheCallersDeadline(t *testing.T) {
	env, older := olderSession(t)
	a := attach(t, env, older.Name(), false)
	env.SetKnob("FAKEMSB_FAULTS", "copy=delay:6s")
	first := make(chan error, 1)
	go func() {
		_, err := a.Shell(context.Background(), lsCall, session.ShellOptions{})
		first <- err
	}()
	require.Eventually(t, func() bool { return len(replacements(t, env)) == 1 }, 5*time.Second, 20*time.Millisecond, "the first call's copy began")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := a.Shell(ctx, lsCall, session.ShellOptions{})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Len(t, replacements(t, env), 1, "the second call returned before the first's copy ended")
	require.NoError(t, <-first)
	requireReplacedOnce(t, env, a.Name())
	res, err := a.Shell(context.Background(), lsCall, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
}
