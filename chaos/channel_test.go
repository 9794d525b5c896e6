//go:build unix

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

var channelSessionsFlag = flag.Int("chaos.channels", 12, "sessions whose guest-agent channels TestChaosChannel kills")

// A channel kill is how a channel dies under calls in flight.
const (
	killAgent   = "kill the agent"
	killMsb     = "kill msb exec --stream"
	stopSandbox = "stop the sandbox"
)

// channelNotes is what each channel session writes first; every later read
// must still find it.
var channelNotes = strings.Repeat("alpha beta\n", 50) + "needle\n"

// inFlight are the calls that run while a channel is killed: each lasts
// long enough (or streams enough) to be cut. glob and grep are left out:
// one cut before its readiness marker poisons the session by design (see
// docs/tools.md); so is edit, whose refusals (no change, text not found)
// would mask how a cut ends. TestChaos runs all of them with the channel
// on.
var inFlight = []struct{ name, input string }{
	{"bash", `{"command":"sleep 1; echo done","timeout":5}`},
	{"bash", `{"command":"seq 1 200000 | tail -n 1","timeout":5}`},
	{"bash", `{"command":"sleep 30 & echo started","timeout":5}`},
	{"read", `{"path":"chaos/notes.txt"}`},
	{"write", `{"path":"chaos/other.txt","content":"x"}`},
	{"ls", `{"path":"chaos"}`},
}

// TestChaosChannel runs -chaos.channels sessions with the guest-agent
// channel on, four at a time (each worker on its own fakemsb), and kills
// their channels at random moments (0-300 ms) while 2-4 calls are in
// flight, some of them also cancelled at random: the agent (SIGKILL), the
// host's msb exec --stream (SIGKILL), or the sandbox (msb stop, as another
// process would). Every call must end before its deadline (6 s, against
// about 1 s for the slowest) with a result or a typed error, and the calls
// cut by a killed agent or msb with ErrChannelBroken, a cancellation or a
// bash command's own failure; the killed channel's processes must be gone
// within seconds. The session must keep working: after the first death
// the next call reopens the channel (new processes), after the second it
// runs with one msb exec per call (no channel process), and every read
// finds the file written first. A stopped sandbox poisons the session,
// which must keep its workspace. Every fourth session meets a guest that
// replaces the agent with one that acks stdin without reading it (see
// replaceAgent). Close must then work at once, and the run leaves
// nothing: no sandbox, volume, holder, msb or agent process, or goroutine.
func TestChaosChannel(t *testing.T) {
	requireFakemsb(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	agent, forgery := agentFile(t), forgedAgent(t)
	seed := pickSeed()
	t.Logf("seed %d (rerun with -chaos.seed=%d -chaos.channels=%d)", seed, seed, *channelSessionsFlag)

	rec := newRecorder(hostTiming)
	envs := newEnvs(t, 4)
	took := runPool(len(envs), *channelSessionsFlag, seed, func(worker, k int, rng *rand.Rand) {
		runChannelSession(envs[worker], rec, agent, forgery, k, rng)
	})
	t.Logf("%d channel sessions on %d fakemsbs in %v", *channelSessionsFlag, len(envs), took)
	checkClean(t, envs, rec)
	rec.summary(t)
	if rec.outcomes[forgeryMet] == 0 && *channelSessionsFlag >= 4 {
		t.Errorf("no session's write reached a forged agent: %v", rec.outcomes)
	}
}

// runChannelSession is one session's life under channel kills: create,
// write the notes, then up to three rounds of calls in flight and a kill,
// each followed by a read that must work (or, after a stop, fail typed
// with the workspace kept), then close. Every fourth session, the first
// among them, has its agent replaced by the forgery instead (see
// replaceAgent).
func runChannelSession(env *fakemsbtest.Env, rec *recorder, agent, forgery string, k int, rng *rand.Rand) {
	client := msb.NewClient(&watch{rec: rec, inner: &msb.CLI{Path: env.Bin}})
	tm := rec.timing
	// The session's and the tools' debug log goes into the failures that
	// name the session, to say what the channel went through.
	log := &testutil.LockedBuffer{}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var sess *microvm.Session
	err := rec.op(nil, k, "create", tm.createDeadline, func(ctx context.Context) (err error) {
		sess, err = microvm.Create(ctx, microvm.Options{
			Client: client, WorkspaceID: "chaos", SessionID: "s" + strconv.Itoa(k), Image: "debian",
			OperationTimeout: tm.opTimeout, StartupTimeout: tm.startupTimeout, AgentFile: agent, Logger: logger,
		})
		return err
	})
	if err != nil {
		rec.fail("session %d: create: %v", k, err)
		return
	}
	defer func() {
		rec.closeUntilDone(nil, k, sess.Close)
		rec.awaitNoChannel(env, sess.Name(), "after close")
	}()
	rec.logs(sess.Name(), log)
	tb := tools.New(sess, tools.Options{OperationTimeout: tm.toolTimeout, Logger: logger})
	write, _ := json.Marshal(map[string]string{"path": "chaos/notes.txt", "content": channelNotes})
	if err := rec.call(nil, k, tb, "write", "write", write, tm.toolDeadline, nil); err != nil {
		rec.fail("%s: the first write: %v", sess.Name(), err)
		return
	}
	if k%4 == 0 {
		rec.replaceAgent(env, k, sess, forgery, logger)
		return
	}

	for deaths := 0; deaths < 2; deaths++ {
		open := env.Channel(sess.Name())
		if len(open.Msb) != 1 || len(open.Agents) != 1 {
			rec.fail("%s: after %d channel deaths, want one open channel, have %+v", sess.Name(), deaths, open)
			return
		}
		kill := []string{killAgent, killAgent, killMsb, killMsb, stopSandbox}[rng.IntN(5)]
		errs := rec.killUnderCalls(env, k, tb, sess.Name(), kill, open, rng)
		if kill == stopSandbox {
			rec.afterStop(env, k, tb, sess, errs)
			return
		}
		for _, err := range errs {
			if err != nil && !cutByDeadChannel(err) {
				rec.fail("%s: a call cut by %q ended with %v, want ErrChannelBroken, a cancellation or the command's own failure", sess.Name(), kill, err)
			}
		}
		rec.awaitGone(sess.Name(), kill, open)
		if !rec.readNotes(env, k, tb, sess) {
			return
		}
		now := env.Channel(sess.Name())
		switch {
		case deaths == 0 && (len(now.Msb) != 1 || len(now.Agents) != 1 || slices.Equal(now.Agents, open.Agents)):
			rec.fail("%s: after the first death the next call must reopen the channel; processes before %+v, now %+v", sess.Name(), open, now)
			return
		case deaths == 1 && !now.Empty():
			rec.fail("%s: after the second death calls must use one msb exec each; channel processes %+v", sess.Name(), now)
			return
		}
		rec.count(fmt.Sprintf("channel death %d (%s), session kept working", deaths+1, kill))
	}
	// One msb exec per call from here on.
	rec.readNotes(env, k, tb, sess)
	if now := env.Channel(sess.Name()); !now.Empty() {
		rec.fail("%s: a channel reopened after falling back: %+v", sess.Name(), now)
	}
}

// killUnderCalls starts 2-4 calls from inFlight, kills the channel (open)
// as kill says after 0-300 ms, and returns how the calls ended.
func (r *recorder) killUnderCalls(env *fakemsbtest.Env, k int, tb *tools.Toolbox, name, kill string, open fakemsbtest.ChannelProcs, rng *rand.Rand) []error {
	n := 2 + rng.IntN(3)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		c := inFlight[rng.IntN(len(inFlight))]
		callRng := rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
		wg.Go(func() {
			errs[i] = r.call(callRng, k, tb, c.name, c.name, json.RawMessage(c.input), r.timing.toolDeadline, nil)
		})
	}
	time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	var err error
	switch kill {
	case killAgent:
		err = syscall.Kill(open.Agents[0], syscall.SIGKILL)
	case killMsb:
		err = syscall.Kill(open.Msb[0], syscall.SIGKILL)
	case stopSandbox:
		ctx, cancel := context.WithTimeout(context.Background(), r.timing.opTimeout)
		err = msb.NewClient(&msb.CLI{Path: env.Bin}).Stop(ctx, msb.StopOptions{Names: []string{name}})
		cancel()
	}
	if err != nil {
		r.fail("%s: %s: %v", name, kill, err)
	}
	wg.Wait()
	r.count(kill)
	return errs
}

// forgeryMet is the outcome of a session whose write met the forged agent.
const forgeryMet = "agent replaced by a forgery, its calls failed typed, workspace kept"

// replaceAgent is the hostile guest's "replace the agent with one that
// acks stdin without reading it": the forgery is written over the agent's
// file in the guest, the running agent killed, and a write of 8 MiB, whose
// content travels on stdin, reopens the channel to the forgery. The host
// may take no more of that stdin than a call's window and the channel's
// queue bound, plus what the pipes to the guest hold; the write must end
// with ErrChannelBroken within its deadline, and the session's later calls,
// by one msb exec each to the forgery, fail typed.
func (r *recorder) replaceAgent(env *fakemsbtest.Env, k int, sess *microvm.Session, forgery string, logger *slog.Logger) {
	name := sess.Name()
	open := env.Channel(name)
	if len(open.Msb) != 1 || len(open.Agents) != 1 {
		r.fail("%s: want one open channel, have %+v", name, open)
		return
	}
	if err := syscall.Kill(open.Agents[0], syscall.SIGKILL); err != nil {
		r.fail("%s: %s: %v", name, killAgent, err)
		return
	}
	// The file cannot be rewritten while the agent runs it.
	r.awaitGone(name, killAgent, open)
	file, err := env.GuestFile(name, fakemsbtest.AgentGuestPath)
	if err == nil {
		err = copyOver(forgery, file)
	}
	if err != nil {
		r.fail("%s: placing the forged agent: %v", name, err)
		return
	}

	// The write is an upload the channel bounds: 2 MiB, four times what
	// the host may take of it. It has three times a tool's time, as it may
	// go by one exec on a loaded machine (below).
	counted := &stdinCounter{Session: sess}
	tb := tools.New(counted, tools.Options{OperationTimeout: 3 * r.timing.toolTimeout, Logger: logger})
	const size = 2 << 20
	input, _ := json.Marshal(map[string]string{"path": "chaos/big.txt", "content": strings.Repeat("x", size)})
	write := func(ctx context.Context) error {
		_, err := tb.Call(ctx, "write", input, nil)
		return err
	}
	// The write reopens the channel to the forgery, which must break it
	// ("ack of" bytes it was never given). It is tried again, up to three
	// times, when it went to the killed agent's channel before the host saw
	// it die, or when the reopen failed on a loaded machine (msb inspect or
	// the forgery's hello past their deadlines) and the write went by one
	// msb exec, whatever that exec's outcome.
	op := "write to a forged agent"
	met := false
	for attempt := 0; attempt < 3 && !met; attempt++ {
		counted.n.Store(0)
		before := sess.Served().Exec
		err = r.op(nil, k, op, 3*r.timing.toolDeadline, write)
		switch {
		case errors.Is(err, session.ErrChannelBroken) && strings.Contains(err.Error(), "ack of"):
			met = true
		case errors.Is(err, session.ErrChannelBroken), sess.Served().Exec > before:
		default:
			r.fail("%s: a write to a forged agent that acks stdin it never reads: %v, want ErrChannelBroken", name, err)
			return
		}
	}
	if !met {
		// The forgery may still be what the next open reaches: the session
		// is closed as it is, and the run checks that nothing is left.
		r.count("agent replaced by a forgery, never reached: the channel did not reopen in time")
		return
	}
	// Bytes the pipes to the guest (msb's stdin, then the agent's) hold
	// are acknowledgeable; they take less than 256 KiB.
	if n, bound := counted.n.Load(), int64(agentwire.MaxStdinQueue+agentwire.MaxChunk+256<<10); n > bound {
		r.fail("%s: the host took %d bytes of stdin for a forged agent that reads none, more than %d", name, n, bound)
	}
	r.awaitNoChannel(env, name, "after the forged agent's channel broke")
	// The forgery is the sandbox's only agent now, run by one exec per
	// call: the session's calls fail, each with a typed error and within
	// its deadline, and the notes stay in the workspace on the host.
	_, err = r.readAfter(k, tb, "read from the forged agent")
	if !errors.Is(err, glob.ErrMalformed) && !errors.Is(err, session.ErrChannelBroken) {
		r.fail("%s: a read the forged agent answers: %v, want malformed guest output", name, err)
		return
	}
	if now := env.Channel(name); !now.Empty() {
		r.fail("%s: a channel reopened after the forged agent's: %+v", name, now)
	}
	r.checkKept(fakemsbVolumeDir(env), sess, true)
	r.count(forgeryMet)
}

// stdinCounter counts the stdin bytes the host takes from its calls.
type stdinCounter struct {
	session.Session
	n atomic.Int64
}

func (c *stdinCounter) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	if o.Stdin != nil {
		o.Stdin = &countingReader{r: o.Stdin, n: &c.n}
	}
	return c.Session.Shell(ctx, cmd, o)
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// copyOver rewrites dst in place with src's content: dst keeps its inode,
// which is what the guest sees.
func copyOver(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0)
}

// forgedAgent builds chaos/forgedagent for the guest and returns its path.
func forgedAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "forgedagent")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/oma-sandbox/oma-sandbox/chaos/forgedagent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the forged agent: %v\n%s", err, out)
	}
	return bin
}

// cutByDeadChannel reports whether err is how a call may end when its
// channel dies under it: ErrChannelBroken, a random cancellation, or a
// bash command's own non-zero exit (the kill reaches the command first).
func cutByDeadChannel(err error) bool {
	var cmdErr *tools.CommandError
	return errors.Is(err, session.ErrChannelBroken) || errors.Is(err, session.ErrAborted) ||
		errors.Is(err, context.Canceled) || errors.As(err, &cmdErr)
}

// afterStop checks a session whose sandbox was stopped under its calls:
// the next call fails typed (the session is poisoned) or, if msb started
// the sandbox again, reads the notes; the workspace is kept either way.
func (r *recorder) afterStop(env *fakemsbtest.Env, k int, tb *tools.Toolbox, sess *microvm.Session, errs []error) {
	for _, err := range errs {
		if kind := classify(err); kind == untyped {
			r.fail("%s: a call cut by a stop ended untyped: %v", sess.Name(), err)
		}
	}
	out, err := r.readAfter(k, tb, "read after stop")
	switch {
	case errors.Is(err, session.ErrPoisoned):
		r.checkKept(fakemsbVolumeDir(env), sess, true)
	case err == nil && strings.Contains(out, "needle"):
		r.count("sandbox stopped, session kept working")
	default:
		r.fail("%s: read after the sandbox stopped: %v (%.80q)", sess.Name(), err, out)
	}
	r.awaitNoChannel(env, sess.Name(), "after the stop")
}

// readAfter reads the notes after a kill. A call may start on a channel
// whose death the host has not seen yet (the agent's output has not ended
// on the host's side), and then fail with ErrChannelBroken: the one after
// it must not.
func (r *recorder) readAfter(k int, tb *tools.Toolbox, op string) (string, error) {
	var out string
	read := func(ctx context.Context) (err error) {
		out, err = tb.Call(ctx, "read", json.RawMessage(`{"path":"chaos/notes.txt"}`), nil)
		return err
	}
	err := r.op(nil, k, op, r.timing.toolDeadline, read)
	if errors.Is(err, session.ErrChannelBroken) {
		err = r.op(nil, k, op+", again", r.timing.toolDeadline, read)
	}
	return out, err
}

// readNotes reads the notes back and checks them; false means the session
// is not usable any more.
func (r *recorder) readNotes(env *fakemsbtest.Env, k int, tb *tools.Toolbox, sess *microvm.Session) bool {
	name := sess.Name()
	out, err := r.readAfter(k, tb, "read after the kill")
	if id := knownIssueOf("read", err); err != nil && id != "" {
		r.mu.Lock()
		r.sawKnown(id, fmt.Sprintf("%s: read after the kill: %v", name, err))
		r.mu.Unlock()
		r.checkKept(fakemsbVolumeDir(env), sess, true)
		return false
	}
	switch {
	case err != nil:
		r.fail("%s: the session stopped working after its channel died: %v", name, err)
		return false
	case !strings.Contains(out, "needle"):
		r.fail("%s: the notes changed: %.80q", name, out)
	}
	return true
}

// awaitGone waits up to five seconds for the killed channel's processes to
// end: the session must reap them without waiting for its next call.
func (r *recorder) awaitGone(name, kill string, procs fakemsbtest.ChannelProcs) {
	pids := slices.Concat(procs.Msb, procs.Agents)
	deadline := time.Now().Add(5 * time.Second)
	for {
		live := slices.DeleteFunc(slices.Clone(pids), func(pid int) bool { return !running(pid) })
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.fail("%s: after %q, channel processes %v still run", name, kill, live)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitNoChannel waits up to five seconds for no channel process of
// sandbox to run.
func (r *recorder) awaitNoChannel(env *fakemsbtest.Env, sandbox, when string) {
	deadline := time.Now().Add(5 * time.Second)
	for !env.Channel(sandbox).Empty() {
		if time.Now().After(deadline) {
			r.fail("%s: %s, channel processes still run: %+v", sandbox, when, env.Channel(sandbox))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether pid is a process that has not ended (a zombie
// has).
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// fail records a failure; one that names a session whose log was kept
// (see logs) carries its operations and its log.
func (r *recorder) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	name, _, _ := strings.Cut(msg, ":")
	if trail := r.trailOf(name); !strings.HasPrefix(trail, " (") {
		msg += "\noperations:" + trail
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if log := r.sessionLogs[name]; log != nil {
		msg += "\nlog:\n" + log.String()
	}
	r.failures = append(r.failures, msg)
}

// logs keeps session name's log for the failures that name it.
func (r *recorder) logs(name string, log *testutil.LockedBuffer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessionLogs == nil {
		r.sessionLogs = map[string]*testutil.LockedBuffer{}
	}
	r.sessionLogs[name] = log
}

func (r *recorder) count(outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes[outcome]++
}
