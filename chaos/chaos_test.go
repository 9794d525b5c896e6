//go:build unix

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/reaper"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

var (
	// 100 sessions cost about 75 s of CPU on fakemsb under -race, which
	// keeps the default run near a minute on two cores; the full mode is
	// -chaos.sessions=200.
	sessionsFlag = flag.Int("chaos.sessions", 100, "sessions to open, each with random faults")
	workersFlag  = flag.Int("chaos.workers", 12, "sessions in flight at once, each worker on its own fakemsb")
	seedFlag     = flag.Uint64("chaos.seed", 0, "random seed; 0 picks one (logged, to rerun with)")
)

// timing is what a run's sessions and tools wait for, each operation's
// deadline, and how far past it an operation may end.
type timing struct {
	opTimeout   time.Duration // session: the preparation exec and each removal
	toolTimeout time.Duration // tools: each guest command
	// forgedTimeout is the timeout a forged bash call asks for: the call
	// must end by its command's own status within it, so it leaves room to
	// start the command (an emulated VM under load took over 2 s), yet
	// stays short of the 30 s the forged command that keeps running sleeps.
	forgedTimeout  time.Duration
	startupTimeout time.Duration
	createDeadline time.Duration
	toolDeadline   time.Duration
	closeDeadline  time.Duration
	reapDeadline   time.Duration
	// cancelWithin is how soon after it began a random cancellation may
	// hit an operation.
	cancelWithin time.Duration
	// slack covers msb.DefaultWaitDelay (a killed msb's pipes may stay
	// open that long) and scheduling on a loaded two-core machine.
	slack time.Duration
	// hangGrace is how long past its limit an operation may run before the
	// suite calls it hung and stops with every goroutine's stack.
	hangGrace time.Duration
	// allowance is how long an operation may outlive its deadline because
	// the library finishes cleanup with the caller's cancellation detached
	// (context.WithoutCancel), each step bounded by its own documented
	// timeout.
	allowance map[string]time.Duration
}

// hostTiming is the timing of sessions that run at the host's speed: on
// fakemsb and the local backend. Its timeouts are short so that hangs cost
// little, yet leave the grep preflight (several rg runs in the create's one
// exec) room on a loaded machine; the deadlines leave room for the host
// timeouts they derive from.
var hostTiming = func() timing {
	const opTimeout = 5 * time.Second
	return timing{
		opTimeout:      opTimeout,
		toolTimeout:    2 * time.Second,
		forgedTimeout:  2 * time.Second,
		startupTimeout: 3 * time.Second,
		createDeadline: 10 * time.Second,
		toolDeadline:   6 * time.Second,
		closeDeadline:  12 * time.Second,
		reapDeadline:   5 * time.Second,
		cancelWithin:   400 * time.Millisecond,
		slack:          msb.DefaultWaitDelay + time.Second,
		hangGrace:      30 * time.Second,
		allowance: map[string]time.Duration{
			// A failed create removes the sandbox, then the volume, and
			// tries once more what failed; the faults make at most one
			// step hang.
			"create": 2 * opTimeout,
			// bash kills the command's processes: a 5 s guest timer plus
			// the grace.
			"bash": 5*time.Second + session.HostGrace,
			// glob and grep end their guest work (a 3 s cleanup plus the
			// grace) and may then poison the session (a stop, and a
			// removal if the stop fails, each bounded by the session's
			// operation timeout).
			"glob": 3*time.Second + session.HostGrace + 2*opTimeout,
			"grep": 3*time.Second + session.HostGrace + 2*opTimeout,
		},
	}
}()

// scaled is tm with every duration n times as long, but forgedTimeout at
// most 4 times (see there).
func (tm timing) scaled(n int) timing {
	d := time.Duration(n)
	out := timing{
		opTimeout: tm.opTimeout * d, toolTimeout: tm.toolTimeout * d, startupTimeout: tm.startupTimeout * d,
		forgedTimeout:  tm.forgedTimeout * min(d, 4),
		createDeadline: tm.createDeadline * d, toolDeadline: tm.toolDeadline * d,
		closeDeadline: tm.closeDeadline * d, reapDeadline: tm.reapDeadline * d,
		cancelWithin: tm.cancelWithin * d, slack: tm.slack * d, hangGrace: tm.hangGrace * d,
		allowance: make(map[string]time.Duration, len(tm.allowance)),
	}
	for op, a := range tm.allowance {
		out.allowance[op] = a * d
	}
	return out
}

// pickSeed is -chaos.seed, or a fresh seed where it is 0; the caller logs
// it with the flags to rerun with.
func pickSeed() uint64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	return rand.Uint64()
}

// newEnvs starts n fakemsbs, one per worker.
func newEnvs(t *testing.T, n int) []*fakemsbtest.Env {
	envs := make([]*fakemsbtest.Env, n)
	for i := range envs {
		envs[i] = fakemsbtest.New(t)
	}
	return envs
}

// runPool runs sessions 0 to n-1 on workers goroutines, session k with its
// own generator seeded from seed and k, so that a rerun with the same seed
// replays each session whichever worker takes it; it returns how long they
// all took.
func runPool(workers, n int, seed uint64, run func(worker, k int, rng *rand.Rand)) time.Duration {
	start := time.Now()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for k := range jobs {
				run(w, k, rand.New(rand.NewPCG(seed, uint64(k))))
			}
		})
	}
	for k := range n {
		jobs <- k
	}
	close(jobs)
	wg.Wait()
	return time.Since(start).Round(time.Millisecond)
}

// TestChaos opens -chaos.sessions sessions on fakemsb, -chaos.workers at a
// time, each with a random FAKEMSB_FAULTS plan (see plan) and random
// cancellations, runs a few tool calls in each (some of them a hostile
// guest's commands and calls aimed at what they leave, see hostile) and
// closes it. A session that gets poisoned must still have its workspace
// and the file it wrote (see checkKept); a glob or grep result must stay
// inside the workspace (see checkResult). Then no
// sandbox or volume may be left; after one reaper pass per fakemsb that
// clears what was, no process may be left either (see checkClean); every
// operation must have succeeded or returned a typed error (see classify),
// and none may have run past its deadline plus its allowance and slack.
// Failures that are known issues of other packages (see knownIssues) are
// logged, and fail the test under -chaos.strict.
func TestChaos(t *testing.T) {
	requireFakemsb(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	seed := pickSeed()
	t.Logf("seed %d (rerun with -chaos.seed=%d -chaos.sessions=%d -chaos.workers=%d)", seed, seed, *sessionsFlag, *workersFlag)

	agent := agentFile(t)
	rec := newRecorder(hostTiming)
	envs := newEnvs(t, *workersFlag)
	took := runPool(len(envs), *sessionsFlag, seed, func(worker, k int, rng *rand.Rand) {
		runSession(fakemsbTarget(envs[worker], agent), rec, k, rng)
	})
	t.Logf("%d sessions on %d fakemsbs in %v", *sessionsFlag, len(envs), took)

	// Every session removed what it made: a leak is a failure, whatever a
	// reaper could do about it later.
	for i, env := range envs {
		for _, name := range append(env.Sandboxes(t), env.Volumes(t)...) {
			t.Errorf("fakemsb %d: %s left by its session:%s", i, name, rec.trailOf(name))
		}
	}
	// The reaper pass only clears the leaks reported above, so that the
	// checks below see this run's processes.
	for i, env := range envs {
		_, err := reaper.Reap(context.Background(), msb.NewClient(&msb.CLI{Path: env.Bin}), reaper.Options{
			OlderThan: time.Nanosecond,
			Now:       func() time.Time { return time.Now().Add(time.Hour) },
		})
		if err != nil {
			t.Errorf("fakemsb %d: reaper pass: %v", i, err)
		}
	}
	checkClean(t, envs, rec)
	rec.summary(t)
}

func requireFakemsb(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("fakemsb needs root for its bwrap namespace holders")
	}
	for _, tool := range []string{"bwrap", "nsenter", "setpriv", "rg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("fakemsb's guests need %s on the host: %v", tool, err)
		}
	}
}

// recorder collects every operation's outcome, each checked against the
// run's timing.
type recorder struct {
	timing    timing
	mu        sync.Mutex
	outcomes  map[string]int // "op: kind" -> count
	failures  []string
	known     map[string]int    // knownIssue id -> occurrences
	example   map[string]string // knownIssue id -> one occurrence
	overshoot time.Duration
	// killed holds the sandboxes whose create the client killed, true
	// once the client then removed them.
	killed map[string]bool
	// trails holds each session's operations, to explain what it left.
	trails map[int][]string
	// sessionLogs holds the debug logs of TestChaosChannel's sessions.
	sessionLogs map[string]*testutil.LockedBuffer
}

func newRecorder(tm timing) *recorder {
	return &recorder{timing: tm, outcomes: map[string]int{}, known: map[string]int{}, example: map[string]string{}, killed: map[string]bool{}, trails: map[int][]string{}}
}

// watch is the sessions' msb.Runner: it notes each create the client had
// to kill and whether the client removed that sandbox afterwards.
type watch struct {
	rec   *recorder
	inner msb.Runner
}

func (w *watch) Run(ctx context.Context, c msb.Call) (*msb.Result, error) {
	res, err := w.inner.Run(ctx, c)
	if len(c.Args) < 2 {
		return res, err
	}
	w.rec.mu.Lock()
	defer w.rec.mu.Unlock()
	switch c.Args[0] {
	case "create":
		if i := slices.Index(c.Args, "--name"); i >= 0 && i+1 < len(c.Args) && (errors.Is(err, msb.ErrAborted) || errors.Is(err, msb.ErrHostTimeout)) {
			w.rec.killed[c.Args[i+1]] = false
		}
	case "remove":
		for _, name := range c.Args[1:] {
			if _, ok := w.rec.killed[name]; ok {
				w.rec.killed[name] = true
			}
		}
	}
	return res, err
}

// Start opens the sessions' guest-agent channels (msb exec --stream)
// through the same runner.
func (w *watch) Start(ctx context.Context, c msb.Call) (*msb.Process, error) {
	s, ok := w.inner.(msb.Starter)
	if !ok {
		return nil, msb.ErrNoStarter
	}
	p, err := s.Start(ctx, c)
	w.rec.mu.Lock()
	w.rec.outcomes["channel opens started"]++
	w.rec.mu.Unlock()
	return p, err
}

// op runs one operation under its deadline, perhaps cancelled at a random
// moment (never with a nil rng), and checks how it ended.
func (r *recorder) op(rng *rand.Rand, k int, name string, deadline time.Duration, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cancelAt := time.Duration(-1)
	if rng != nil && rng.IntN(100) < 15 {
		cancelAt = time.Duration(rng.IntN(int(r.timing.cancelWithin/time.Millisecond))) * time.Millisecond
		timer := time.AfterFunc(cancelAt, cancel)
		defer timer.Stop()
	}
	// A hang would otherwise stop the suite until go test's timeout.
	allowance, slack, hangGrace := r.timing.allowance[name], r.timing.slack, r.timing.hangGrace
	limit := deadline + allowance + slack
	hung := time.AfterFunc(limit+hangGrace, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("session %d: %s hung: still running %v after it began", k, name, limit+hangGrace))
	})
	defer hung.Stop()
	start := time.Now()
	err := fn(ctx)
	took := time.Since(start)
	kind := classify(err)

	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes[name+": "+kind]++
	step := fmt.Sprintf("%s: %s in %v", name, kind, took.Round(time.Millisecond))
	if cancelAt >= 0 {
		step += fmt.Sprintf(" (cancelled at %v)", cancelAt)
	}
	if err != nil {
		step += fmt.Sprintf(": %.300v", err)
	}
	r.trails[k] = append(r.trails[k], step)
	if id := knownIssueOf(name, err); err != nil && id != "" {
		r.sawKnown(id, fmt.Sprintf("%s: %v", name, err))
	} else if kind == untyped {
		r.failures = append(r.failures, fmt.Sprintf("%s returned an untyped error: %v", name, err))
	}
	r.overshoot = max(r.overshoot, took-deadline-allowance)
	if took > limit {
		r.failures = append(r.failures, fmt.Sprintf("%s took %v, past its deadline %v + allowance %v + slack %v (err: %v)",
			name, took.Round(time.Millisecond), deadline, allowance, slack, err))
	}
	return err
}

// sessionNumber finds k in the names of session k's resources.
var sessionNumber = regexp.MustCompile(`^oma-chaos-s([0-9]+)-`)

// trailOf lists the operations of the session that made resource name.
func (r *recorder) trailOf(name string) string {
	m := sessionNumber.FindStringSubmatch(name)
	if m == nil {
		return " (not a session's)"
	}
	k, _ := strconv.Atoi(m[1])
	r.mu.Lock()
	defer r.mu.Unlock()
	return "\n\t" + strings.Join(r.trails[k], "\n\t")
}

// sawKnown counts an occurrence of a known issue; r.mu must be held.
func (r *recorder) sawKnown(id, example string) {
	r.known[id]++
	if _, ok := r.example[id]; !ok {
		r.example[id] = example
	}
}

func (r *recorder) summary(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(r.outcomes)) {
		fmt.Fprintf(&b, "\n  %-44s %d", k, r.outcomes[k])
	}
	t.Logf("outcomes:%s", b.String())
	t.Logf("largest time past deadline + allowance: %v (slack %v)", r.overshoot.Round(time.Millisecond), r.timing.slack)
	for _, k := range knownIssues {
		if n := r.known[k.id]; n > 0 {
			report := t.Logf
			if *strict {
				report = t.Errorf
			}
			report("known issue %s (%s): %d times, e.g. %s", k.id, k.where, n, r.example[k.id])
		}
	}
	sort.Strings(r.failures)
	for _, f := range slices.Compact(r.failures) {
		t.Error(f)
	}
}

// target is the msb a run's sessions use.
type target struct {
	cli *msb.CLI
	// faults gives each session a random FAKEMSB_FAULTS plan (see plan):
	// the real msb has no faults to inject.
	faults bool
	image  string
	// agent is the guest agent the channel sessions place; "" places the
	// one bundled into the test binary.
	agent string
	// volumeDir finds the host directory that holds a volume's files.
	volumeDir func(volume string) (string, error)
}

// fakemsbTarget is env with faults and the guest agent at agent.
func fakemsbTarget(env *fakemsbtest.Env, agent string) target {
	return target{cli: &msb.CLI{Path: env.Bin}, faults: true, image: "debian", agent: agent, volumeDir: fakemsbVolumeDir(env)}
}

// fakemsbVolumeDir finds a volume's directory in env's state.
func fakemsbVolumeDir(env *fakemsbtest.Env) func(string) (string, error) {
	return func(volume string) (string, error) { return filepath.Join(env.Home, "volumes", volume), nil }
}

// runSession is one session's life on tg: create, a few tool calls, close
// (again if the first close failed), and sometimes a reaper pass through
// the same faults. Half the sessions place the guest agent, so that their
// calls travel over its channel, which the exec faults then hit too: exec
// #2 is the channel's msb exec --stream, opened by the first call.
func runSession(tg target, rec *recorder, k int, rng *rand.Rand) {
	tm := rec.timing
	calls := 2 + rng.IntN(5)
	cli := *tg.cli
	var faults string
	if tg.faults {
		faults = plan(rng, k, calls)
		cli.Env = append(slices.Clone(cli.Env), "FAKEMSB_FAULTS="+faults)
	}
	client := msb.NewClient(&watch{rec: rec, inner: &cli})
	withChannel := rng.IntN(2) == 0
	if withChannel {
		rec.mu.Lock()
		rec.outcomes["session with the channel"]++
		rec.mu.Unlock()
	}

	var sess *microvm.Session
	err := rec.op(rng, k, "create", tm.createDeadline, func(ctx context.Context) (err error) {
		sess, err = microvm.Create(ctx, microvm.Options{
			Client: client, WorkspaceID: "chaos", SessionID: "s" + strconv.Itoa(k), Image: tg.image,
			OperationTimeout: tm.opTimeout, StartupTimeout: tm.startupTimeout,
			AgentFile: tg.agent, NoChannel: !withChannel,
		})
		return err
	})
	if err == nil {
		tb := tools.New(sess, tools.Options{OperationTimeout: tm.toolTimeout})
		var (
			mu                 sync.Mutex
			wrote, keptChecked bool
		)
		call := func(rng *rand.Rand, name string, input json.RawMessage, forgedCall *forgedCall) {
			err := rec.call(rng, k, tb, name, name, input, tm.toolDeadline, forgedCall)
			mu.Lock()
			defer mu.Unlock()
			wrote = wrote || err == nil && wroteNotes(name, input)
			if sess.Poisoned() && !keptChecked {
				keptChecked = true
				rec.checkKept(tg.volumeDir, sess, wrote)
			}
		}
		// Agent runtimes issue tool calls in parallel: some sessions get
		// all their calls at once, each with its own random stream.
		parallel := rng.IntN(100) < 30
		if parallel {
			rec.mu.Lock()
			rec.outcomes["session with parallel calls"]++
			rec.mu.Unlock()
		}
		var wg sync.WaitGroup
		for i := range calls {
			name, input, forgedCall := toolCall(rng, i, tm.forgedTimeout)
			if !parallel {
				call(rng, name, input, forgedCall)
				continue
			}
			callRng := rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
			wg.Go(func() { call(callRng, name, input, forgedCall) })
		}
		wg.Wait()
		// A caller that means to remove its session closes it until that
		// works; the last attempts are not cancelled, and each fault fires
		// once, so the session must then be gone.
		rec.closeUntilDone(rng, k, sess.Close)
	}
	if strings.Contains(faults, "list#") {
		rec.op(rng, k, "reap", tm.reapDeadline, func(ctx context.Context) error {
			_, err := reaper.Reap(ctx, client, reaper.Options{OlderThan: 24 * time.Hour})
			return err
		})
	}
}

// checkKept checks that a poisoned session still has its workspace: the
// volume's directory on the host (volumeDir finds it), with the file the
// session wrote.
func (r *recorder) checkKept(volumeDir func(string) (string, error), sess *microvm.Session, wrote bool) {
	dir, dirErr := volumeDir(sess.Names().Volume)
	if dirErr == nil {
		_, dirErr = os.Stat(dir)
	}
	_, fileErr := os.Stat(filepath.Join(dir, notesFile))
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case dirErr != nil:
		r.failures = append(r.failures, fmt.Sprintf("poisoning %s lost its workspace volume: %v", sess.Name(), dirErr))
	case wrote && fileErr != nil:
		r.failures = append(r.failures, fmt.Sprintf("poisoning %s lost the agent's file: %v", sess.Name(), fileErr))
	default:
		r.outcomes["poisoned, workspace kept"]++
	}
}

// call runs one tool call as operation op (the tool's name, or a finer
// name with its own allowance) and checks what came back: a successful
// result, or how a forged call ended.
func (r *recorder) call(rng *rand.Rand, k int, tb *tools.Toolbox, op, name string, input json.RawMessage, deadline time.Duration, fc *forgedCall) error {
	var out string
	err := r.op(rng, k, op, deadline, func(ctx context.Context) (err error) {
		out, err = tb.Call(ctx, name, input, nil)
		return err
	})
	if err == nil {
		r.checkResult(name, out)
	}
	if fc != nil {
		r.checkForged(*fc, err)
	}
	return err
}

// closeUntilDone closes a session the way a caller that means to remove
// it does: until that works, the last attempts not cancelled.
func (r *recorder) closeUntilDone(rng *rand.Rand, k int, closeFn func(context.Context) error) {
	closed := false
	for attempt := 0; attempt < 4 && !closed; attempt++ {
		mayCancel := rng
		if attempt >= 2 {
			mayCancel = nil
		}
		closed = r.op(mayCancel, k, "close", r.timing.closeDeadline, closeFn) == nil
	}
}

// checkResult checks what a successful glob or grep returned, whatever the
// guest did to its tree: every path stays inside the workspace.
func (r *recorder) checkResult(name, out string) {
	if name != "glob" && name != "grep" || out == "No files found" || out == "No matches found" {
		return
	}
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "(") || strings.HasPrefix(line, "[") {
			continue // a note on truncation, not a path
		}
		p := line
		if !path.IsAbs(p) {
			p = path.Join("/workspace", p)
		}
		if p != path.Clean(p) && p != path.Clean(p)+"/" || p != "/workspace" && !strings.HasPrefix(p, "/workspace/") {
			r.mu.Lock()
			r.failures = append(r.failures, fmt.Sprintf("%s returned %q, outside the workspace", name, line))
			r.mu.Unlock()
		}
	}
}

// plan draws session k's faults. Exec #1 is the create's preparation; the
// tool calls' execs follow (a search that ends early, or a bash call that
// is killed, adds a cleanup exec). The last rule never fires: it only makes
// each session's spec unique, so fakemsb's fault counts restart with it.
func plan(rng *rand.Rand, k, calls int) string {
	var rules []string
	add := func(percent int, choices ...string) {
		if rng.IntN(100) < percent {
			rules = append(rules, choices[rng.IntN(len(choices))])
		}
	}
	// Create failing at each step.
	add(25,
		"create#1=exit:1:error: chaos: create failed",
		"create#1=hang",
		"create#1=malformed",
		"exec#1=exit:1:error: chaos: prepare failed",
		"exec#1=hang",
		"exec#1=malformed",
	)
	// A tool call's exec hanging, dying mid-stream, truncated or failing.
	n := 2 + rng.IntN(calls)
	add(60,
		fmt.Sprintf("exec#%d=hang", n),
		fmt.Sprintf("exec#%d=die-after:%d", n, 1+rng.IntN(200)),
		fmt.Sprintf("exec#%d=malformed", n),
		fmt.Sprintf("exec#%d=exit:1:error: chaos: exec failed", n),
		fmt.Sprintf("exec#%d=exit:137", n),
	)
	// Removals failing once.
	add(30,
		"remove#1=exit:1:error: chaos: remove failed",
		"remove#1=hang",
		"volume-remove#1=exit:1:error: chaos: volume busy",
		"volume-remove#1=hang",
	)
	// Listings failing for a reaper pass through the same faults.
	add(10,
		"list#1=malformed",
		"list#1=exit:1:error: chaos: database locked",
		"list#1=hang",
		"volume-list#1=malformed",
	)
	rules = append(rules, fmt.Sprintf("start#%d=exit:0", k+1))
	return strings.Join(rules, ";")
}

// hostile are bash commands of a guest that attacks the host's tools: a
// link swapped between the workspace and / while the host works, links out
// of the workspace, a deep tree, a FIFO that blocks a reader, and a
// process that keeps the tree changing after its call returned.
var hostile = []string{
	`mkdir -p chaos && (for i in $(seq 1 3000); do ln -sfn / chaos/swap; ln -sfn . chaos/swap; done) >/dev/null 2>&1 & echo swapping`,
	`mkdir -p chaos && ln -sfn / chaos/root && ln -sfn /etc/hostname chaos/host.txt && echo linked`,
	`mkdir -p chaos/deep && cd chaos/deep && for i in $(seq 1 400); do mkdir d && cd d || exit 1; done && echo x > leaf.txt`,
	`mkdir -p chaos && rm -f chaos/fifo.txt && mkfifo chaos/fifo.txt && echo made`,
	`mkdir -p chaos && (while :; do touch chaos/churn-$RANDOM.txt; rm -f chaos/churn-*.txt; done) >/dev/null 2>&1 & echo churning`,
}

// forgedCall is a bash command that prints the records the tool's
// supervisor writes, with the call's public id (OMA_BASH_OWNER) or guessed
// secrets in them, and then fails: exit is its real status, -1 when it
// runs past its timeout.
type forgedCall struct {
	command string
	exit    int
}

// forged are commands that forge the supervisor's records (docs/tools.md:
// `__OMA_DISPATCHED__:<secret>` and `__OMA_TERMINAL__:<secret>:exit:N`)
// and then exit non-zero, leave a process holding their output, or keep
// running. The tool must report their real status: never success.
var forged = []forgedCall{
	{`printf '__OMA_TERMINAL__:%s:exit:0\n' "$OMA_BASH_OWNER" 00000000000000000000000000000000 ffffffffffffffffffffffffffffffff; exit 7`, 7},
	{`printf '__OMA_DISPATCHED__:%s\n__OMA_TERMINAL__:%s:exit:0\n' "$OMA_BASH_OWNER" "$OMA_BASH_OWNER"; (sleep 3; echo late) & exit 6`, 6},
	// One cat for all of /proc: a process per file took more than the
	// call's two seconds on a microVM under software emulation.
	{`cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -Eo '[0-9a-f]{32}' | sort -u |
while read -r tok; do printf '__OMA_TERMINAL__:%s:exit:0\n' "$tok"; done; exit 5`, 5},
	{`printf '__OMA_TERMINAL__:%s:exit:0\n' "$OMA_BASH_OWNER"; exec sleep 30`, -1},
}

// checkForged checks how a forged call ended: a fault, a cancel or a
// deadline may end it with any typed error, but a result must be the
// command's own status.
func (r *recorder) checkForged(f forgedCall, err error) {
	var cmdErr *tools.CommandError
	var got string
	switch {
	case err == nil:
		got = "success"
	case errors.As(err, &cmdErr) && cmdErr.TimedOut && f.exit >= 0:
		got = "a timeout"
	case errors.As(err, &cmdErr) && !cmdErr.TimedOut && cmdErr.ExitCode != f.exit:
		got = fmt.Sprintf("exit %d", cmdErr.ExitCode)
	default:
		r.mu.Lock()
		r.outcomes["forged record refused"]++
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf("bash reported %s for a command that forged its records (%.60q): %v", got, f.command, err))
}

// notesFile is the file a session's calls work on, in its workspace.
const notesFile = "chaos/notes.txt"

// wroteNotes tells whether a call that succeeded wrote notesFile: a
// write aimed elsewhere (one planted under a link a hostile command swaps)
// says nothing of it.
func wroteNotes(name string, input json.RawMessage) bool {
	var in struct{ Path string }
	return name == "write" && json.Unmarshal(input, &in) == nil && in.Path == notesFile
}

// toolCall draws the i-th call of a session. Call 0 writes the file the
// others work on; an error comes from a fault or from what a hostile
// command did to the tree, and must be typed and timely all the same. A
// forged call is returned with its expected status.
func toolCall(rng *rand.Rand, i int, forgedTimeout time.Duration) (string, json.RawMessage, *forgedCall) {
	var name string
	var input any
	var forgedCall *forgedCall
	switch c := rng.IntN(10); {
	case i == 0 || c == 0:
		name, input = "write", map[string]any{"path": notesFile, "content": strings.Repeat("alpha beta\n", 1+rng.IntN(500)) + "needle\n"}
	case c == 1:
		name, input = "read", map[string]any{"path": notesFile}
	case c == 2:
		name, input = "edit", map[string]any{"path": notesFile, "oldText": "needle", "newText": "needle"}
	case c == 3:
		name, input = "ls", map[string]any{"path": "chaos"}
	case c == 4:
		name, input = "glob", map[string]any{"pattern": "**/*.txt"}
	case c == 5:
		name, input = "grep", map[string]any{"pattern": "needle", "path": "/workspace"}
	case c == 6:
		cmds := []string{"echo hello", "seq 1 2000", "sleep 3", "exit 3", "sleep 30 & echo started"}
		name, input = "bash", map[string]any{"command": cmds[rng.IntN(len(cmds))], "timeout": 1 + rng.IntN(2)}
	case c == 7:
		name, input = "bash", map[string]any{"command": hostile[rng.IntN(len(hostile))], "timeout": 2}
	case c == 8:
		forgedCall = &forged[rng.IntN(len(forged))]
		name, input = "bash", map[string]any{"command": forgedCall.command, "timeout": int(forgedTimeout / time.Second)}
	default:
		// A tool call aimed at what the hostile commands leave.
		targets := []struct {
			name  string
			input map[string]any
		}{
			{"read", map[string]any{"path": "chaos/fifo.txt"}},
			{"read", map[string]any{"path": "chaos/swap/etc/hostname"}},
			{"ls", map[string]any{"path": "chaos/swap"}},
			{"glob", map[string]any{"pattern": "**/leaf.txt"}},
			{"grep", map[string]any{"pattern": "x", "path": "/workspace/chaos"}},
			{"write", map[string]any{"path": "chaos/swap/planted.txt", "content": "x"}},
		}
		t := targets[rng.IntN(len(targets))]
		name, input = t.name, t.input
	}
	raw, _ := json.Marshal(input)
	return name, raw, forgedCall
}
