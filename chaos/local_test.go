//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	localsession "github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// Each local session costs a few seconds of bwrap starts and one 3000-deep
// tree under -race, so the default run adds well under a minute.
var (
	localSessionsFlag = flag.Int("chaos.local.sessions", 8, "local sessions to open, each with hostile guest actions")
	localWorkersFlag  = flag.Int("chaos.local.workers", 2, "local sessions in flight at once")
)

// TestChaosLocal runs the hostile guest's actions on the local backend,
// whose removal works on the host itself: the tool calls of TestChaos (its
// hostile commands, forged records and calls aimed at what they leave),
// a 3000-deep tree, a sparse file with four names, and links to a decoy
// host tree swapped with directories, some of them while Close removes the
// session; then stats, and sometimes a fork, which must end within their
// deadlines and take little of the host's disk; cancels come at random
// points. A session's workspace must stay until its Close (local
// poisoning never removes it); afterwards no session record or state
// directory may be left, no process of the run may be running, and the
// decoy must be exactly as it was. The decoy stands in for `/`: a removal
// that followed a link would change it the same way, without risking the
// machine the test runs on (a static link to `/` is in the tree too).
func TestChaosLocal(t *testing.T) {
	stateDir := t.TempDir()
	probe, err := localsession.Create(context.Background(), localsession.Options{StateDir: stateDir, WorkspaceID: "chaos", SessionID: "probe"})
	if err != nil {
		t.Skipf("no local sandbox on this host: %v", err)
	}
	if err := probe.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	decoy := makeDecoy(t)
	before := snapshotTree(t, decoy)
	seed := pickSeed()
	t.Logf("seed %d (rerun with -run TestChaosLocal -chaos.seed=%d -chaos.local.sessions=%d)", seed, seed, *localSessionsFlag)

	rec := newRecorder(hostTiming)
	took := runPool(*localWorkersFlag, *localSessionsFlag, seed, func(_, k int, rng *rand.Rand) {
		runLocalSession(stateDir, decoy, rec, k, rng)
	})
	t.Logf("%d local sessions in %v", *localSessionsFlag, took)

	if ents, err := os.ReadDir(stateDir); err != nil || len(ents) > 0 {
		t.Errorf("state directory %s after every session closed: %v, %v", stateDir, names(ents), err)
	}
	if listed, err := localsession.List(stateDir); err != nil || len(listed) > 0 {
		t.Errorf("local sessions listed after every session closed: %v, %v", listed, err)
	}
	if after := snapshotTree(t, decoy); after != before {
		t.Errorf("the decoy host tree changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	checkNoProcesses(t, stateDir)
	rec.summary(t)
}

// runLocalSession is one local session's life: create, a few tool calls,
// and a close (again if it failed), sometimes while a call swaps links to
// the decoy in the tree being removed.
func runLocalSession(stateDir, decoy string, rec *recorder, k int, rng *rand.Rand) {
	tm := rec.timing
	var sess *localsession.Session
	err := rec.op(rng, k, "create", tm.createDeadline, func(ctx context.Context) (err error) {
		sess, err = localsession.Create(ctx, localsession.Options{
			StateDir: stateDir, WorkspaceID: "chaos", SessionID: "l" + strconv.Itoa(k), OperationTimeout: tm.opTimeout,
		})
		return err
	})
	if err != nil {
		return
	}
	workspace := filepath.Join(stateDir, sess.Name(), "box", "workspace")
	tb := tools.New(sess, tools.Options{OperationTimeout: tm.toolTimeout})
	wrote := false
	for i := range 3 + rng.IntN(4) {
		op, name, input, forgedCall := localToolCall(rng, i, decoy)
		deadline := tm.toolDeadline
		if _, ok := localHostile(decoy)[op]; ok {
			deadline = hostileDeadline
		}
		err := rec.call(rng, k, tb, op, name, input, deadline, forgedCall)
		wrote = wrote || err == nil && wroteNotes(name, input)
		rec.checkLocalKept(sess.Name(), workspace, wrote)
	}
	// Only a cancel may stop stats: a tree the guest shaped must not
	// outlast the deadline.
	err = rec.op(rng, k, "stats", statsDeadline, func(ctx context.Context) error {
		_, err := sess.Stats(ctx)
		return err
	})
	if errors.Is(err, context.DeadlineExceeded) {
		rec.fail("%s: stats ran out of their %v: %v", sess.Name(), statsDeadline, err)
	}
	if rng.IntN(2) == 0 {
		rec.fork(rng, k, stateDir, sess)
	}

	var during sync.WaitGroup
	if rng.IntN(2) == 0 {
		input, _ := json.Marshal(map[string]any{"command": swapDuringClose(decoy), "timeout": 10})
		during.Go(func() {
			rec.op(nil, k, "bash during close", tm.toolDeadline, func(ctx context.Context) error {
				_, err := tb.Call(ctx, "bash", input, nil)
				return err
			})
		})
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
	}
	rec.closeUntilDone(rng, k, sess.Close)
	during.Wait()
}

// hostileDeadline bounds a localHostile call: making 3000 directories
// takes seconds on a loaded machine. Stats of a 3000-deep tree and a fork
// of a sparse file with four names take a moment each; quadratic stats
// and a copy of every name's apparent size did not fit.
const (
	hostileDeadline = 12 * time.Second
	statsDeadline   = 5 * time.Second
	forkDeadline    = 10 * time.Second
	// maxForkBytes is what a fork's copy may take on disk: the chaos
	// files are small; the sparse ones claim a gigabyte.
	maxForkBytes = 64 << 20
)

func init() {
	hostTiming.allowance["bash deep tree"] = hostTiming.allowance["bash"]
	hostTiming.allowance["bash decoy links"] = hostTiming.allowance["bash"]
	hostTiming.allowance["bash sparse links"] = hostTiming.allowance["bash"]
}

// fork forks sess, checks what the copy takes on the host's disk, and
// closes the fork.
func (r *recorder) fork(rng *rand.Rand, k int, stateDir string, sess *localsession.Session) {
	var fork *localsession.Session
	err := r.op(rng, k, "fork", forkDeadline, func(ctx context.Context) (err error) {
		fork, err = sess.Fork(ctx, localsession.ForkOptions{SessionID: "f" + strconv.Itoa(k)})
		return err
	})
	if errors.Is(err, context.DeadlineExceeded) {
		r.fail("%s: fork ran out of its %v: %v", sess.Name(), forkDeadline, err)
	}
	if err != nil {
		return
	}
	// du counts each inode once and only its allocated blocks.
	out, err := exec.Command("du", "-s", "-B1", filepath.Join(stateDir, fork.Name(), "box", "workspace")).Output()
	fields := strings.Fields(string(out))
	if err != nil || len(fields) == 0 {
		r.fail("du of fork %s: %v", fork.Name(), err)
	} else if n, _ := strconv.ParseInt(fields[0], 10, 64); n > maxForkBytes {
		r.fail("fork %s takes %d bytes on the host, more than %d", fork.Name(), n, maxForkBytes)
	}
	r.closeUntilDone(rng, k, fork.Close)
}

// localHostile are guest actions aimed at the host's own walks of the
// tree, by the name of their operation: a chain deeper than the host could
// walk by open directories (and that stats once walked in quadratic time),
// links to the decoy in place of directories the host would descend into,
// and a sparse file with four names that a fork once copied in full four
// times.
func localHostile(decoy string) map[string]string {
	return map[string]string{
		"bash deep tree":    `mkdir -p chaos/deep3k && cd chaos/deep3k && p=$(printf 'd/%.0s' $(seq 100)) && for i in $(seq 30); do mkdir -p "$p" && cd "$p" || exit 1; done && echo x > leaf.txt && echo deep`,
		"bash sparse links": `mkdir -p chaos/sparse && cd chaos/sparse && rm -f f l1 l2 l3 && truncate -s 256M f && ln f l1 && ln f l2 && ln f l3 && echo sparse`,
		"bash decoy links":  fmt.Sprintf(`mkdir -p chaos/links && ln -sfn %q chaos/links/decoy && ln -sfn %q/sub chaos/links/sub && ln -sfn / chaos/links/root && chmod 500 chaos/links && echo linked`, decoy, decoy),
	}
}

// swapDuringClose swaps chaos/swap between a read-only directory and a
// link to the decoy until Close kills it.
func swapDuringClose(decoy string) string {
	return fmt.Sprintf(`mkdir -p chaos && cd chaos && while :; do
  chmod -R 700 swap 2>/dev/null; rm -rf swap; mkdir -p swap/sub && touch swap/sub/f && chmod 500 swap/sub swap
  chmod 700 swap; rm -rf swap; ln -sfn %q swap; rm -f swap; ln -sfn %q/sub swap; rm -f swap
done`, decoy, decoy)
}

// localToolCall draws the i-th call of a local session: one of TestChaos's
// calls, or sometimes one of localHostile. It returns the operation's name
// and the tool's.
func localToolCall(rng *rand.Rand, i int, decoy string) (op, tool string, input json.RawMessage, forgedCall *forgedCall) {
	if i > 0 && rng.IntN(4) == 0 {
		cmds := localHostile(decoy)
		op := slices.Sorted(maps.Keys(cmds))[rng.IntN(len(cmds))]
		raw, _ := json.Marshal(map[string]any{"command": cmds[op], "timeout": 10})
		return op, "bash", raw, nil
	}
	tool, input, forgedCall = toolCall(rng, i, hostTiming.forgedTimeout)
	return tool, tool, input, forgedCall
}

// checkLocalKept checks that an open local session still has its
// workspace, and the file it wrote, whatever the calls did.
func (r *recorder) checkLocalKept(name, workspace string, wrote bool) {
	_, dirErr := os.Lstat(workspace)
	_, fileErr := os.Lstat(filepath.Join(workspace, notesFile))
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case dirErr != nil:
		r.failures = append(r.failures, fmt.Sprintf("local session %s lost its workspace before its Close: %v", name, dirErr))
	case wrote && fileErr != nil:
		r.failures = append(r.failures, fmt.Sprintf("local session %s lost the agent's file before its Close: %v", name, fileErr))
	}
}

// makeDecoy makes a host tree the guest links to.
func makeDecoy(t *testing.T) string {
	t.Helper()
	decoy := filepath.Join(t.TempDir(), "decoy")
	for _, d := range []string{decoy, filepath.Join(decoy, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), []byte("host file\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return decoy
}

// snapshotTree describes every entry under root: path, mode, size.
func snapshotTree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d\n", p, info.Mode(), info.Size())
		return nil
	})
	if err != nil {
		fmt.Fprintf(&b, "walk: %v\n", err)
	}
	return b.String()
}

// checkNoProcesses fails for any child of this process still running and
// any process whose command line names the state directory (bwrap binds
// a session's directories by their host paths).
func checkNoProcesses(t *testing.T, stateDir string) {
	t.Helper()
	self := strconv.Itoa(os.Getpid())
	eachLiveProcess(func(pid, _, ppid, what string) {
		if ppid == self || strings.Contains(what, stateDir) {
			t.Errorf("process %s left: %.200s", pid, what)
		}
	})
}

func names(ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestKnownForkDeepTree keeps fork-deep-tree fixed: a fork of a workspace
// nested 300 directories deep, past the 256 levels CopyTree once refused
// with an error no caller could test for, copies the whole tree.
func TestKnownForkDeepTree(t *testing.T) {
	ctx := context.Background()
	s, err := localsession.Create(ctx, localsession.Options{StateDir: t.TempDir(), WorkspaceID: "known", SessionID: "s"})
	if err != nil {
		t.Skipf("no local sandbox on this host: %v", err)
	}
	defer s.Close(ctx)
	tb := tools.New(s, tools.Options{})
	raw, _ := json.Marshal(map[string]any{"command": `for i in $(seq 300); do mkdir d && cd d || exit 1; done && echo x > leaf.txt`})
	if _, err := tb.Call(ctx, "bash", raw, nil); err != nil {
		t.Fatal(err)
	}
	fork, err := s.Fork(ctx, localsession.ForkOptions{SessionID: "f"})
	if err != nil {
		t.Fatalf("fork of a 300-deep tree: %v", err)
	}
	defer fork.Close(ctx)
	raw, _ = json.Marshal(map[string]any{"command": `cat "$(printf 'd/%.0s' $(seq 300))leaf.txt"`})
	out, err := tools.New(fork, tools.Options{}).Call(ctx, "bash", raw, nil)
	if err != nil || out != "x\n" {
		t.Fatalf("the fork's deepest file: %q, %v", out, err)
	}
}
