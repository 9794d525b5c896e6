package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// ls sorts bare names case-insensitively with a locale-aware comparison, as
// the seed's agents see them.
func TestLsOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		sh(t, s, `mkdir d && touch d.txt zeta.txt été.txt fichier.txt Eagle.md`)
		assert.Equal(t, "d/\nd.txt\nEagle.md\nété.txt\nfichier.txt\nzeta.txt", mustCall(t, tb, "ls", obj{}))
	})
}

// A name holding a newline is shown quoted, so one file never reads as two;
// the write tool's temporary files are never listed.
func TestListingsEscapeNamesAndHideTempFiles(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		ws := s.Paths().Workspace
		sh(t, s, `mkdir q && printf 'needle\n' > "q/two
lines.txt" && printf 'needle\n' > q/.oma-write.AbCdEfGh && printf 'needle\n' > q/plain.txt`)
		assert.Equal(t, "plain.txt\n\"two\\nlines.txt\"", mustCall(t, tb, "ls", obj{"path": "q"}))
		assert.ElementsMatch(t, []string{"q/plain.txt", `"q/two\nlines.txt"`}, strings.Split(mustCall(t, tb, "glob", obj{"pattern": "q/*"}), "\n"))
		assert.Equal(t, ws+"/q/plain.txt\n\""+ws+"/q/two\\nlines.txt\"", mustCall(t, tb, "grep", obj{"pattern": "needle", "path": ws + "/q"}))
	})
}

// grep returns the same files in the same order however often it runs, and
// says when it kept fewer than match.
func TestGrepStableAndAnnouncesTruncation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		ws := s.Paths().Workspace
		sh(t, s, `mkdir -p m/a m/b m/c && for d in a b c; do for i in $(seq 1 30); do echo needle > "m/$d/f$i"; done; done`)
		first := mustCall(t, tb, "grep", obj{"pattern": "needle", "path": ws + "/m", "head_limit": 3})
		assert.Equal(t, ws+"/m/a/f1\n"+ws+"/m/a/f10\n"+ws+"/m/a/f11\n\n[Showing the first 3 results; more match. Raise head_limit (at most 100), or narrow path or glob.]", first)
		for range 3 {
			assert.Equal(t, first, mustCall(t, tb, "grep", obj{"pattern": "needle", "path": ws + "/m", "head_limit": 3}))
		}
		out := mustCall(t, tb, "grep", obj{"pattern": "needle", "path": ws + "/m/a"})
		assert.NotContains(t, out, "[", "30 files under the limit: no note")
	})
}

// An unreadable directory does not empty a search: the matches come back
// with a note naming what could not be searched.
func TestSearchesSurviveUnreadableDirectory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		ws := s.Paths().Workspace
		sh(t, s, `mkdir -p u/locked u/open && echo needle > u/locked/x.txt && echo needle > u/open/y.txt && chmod 000 u/locked`)
		t.Cleanup(func() {
			_, _ = s.Shell(context.Background(), session.Command{Script: `chmod 755 u/locked`}, session.ShellOptions{})
		})
		readable := sh(t, s, `if [ -r u/locked ]; then echo yes; fi`) == "yes\n"

		out := mustCall(t, tb, "grep", obj{"pattern": "needle", "path": ws + "/u"})
		g := mustCall(t, tb, "glob", obj{"pattern": "*.txt", "path": "u"})
		if readable {
			t.Log("the guest user reads any directory (root): only the matches are checked")
			assert.Equal(t, ws+"/u/locked/x.txt\n"+ws+"/u/open/y.txt", out)
			return
		}
		// ripgrep's wording varies with its version.
		assert.Regexp(t, `^`+ws+`/u/open/y.txt\n\n\[Could not search: `+ws+`/u/locked: .*Permission denied \(os error 13\)\]$`, out)
		assert.Equal(t, "u/open/y.txt\n\n[Could not search: './locked': Permission denied]", g)
	})
}

// rgParent prints the name of the parent of the tagged rg searching $1
// ("out of sight" when its pid reads 0: agentOutOfSight).
const rgParent = `for d in /proc/[0-9]*; do
	[ "$(cat "$d/comm" 2>/dev/null)" = rg ] || continue
	tr '\0' '\n' <"$d/cmdline" 2>/dev/null | grep -qxF -- "$1" || continue
	tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -q '^OMA_GREP_OWNER=' || continue
	set -- $(sed 's/.*) //' "$d/stat")
	[ "$2" = 0 ] && { echo "out of sight"; exit 0; }
	cat "/proc/$2/comm"
	exit 0
done`

// glob and grep end at the toolbox's operation timeout, not the session's.
// The agent itself starts the search's rg.
func TestSearchUsesOperationTimeout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		// Long enough that rg is seen running on a loaded machine.
		timeout := time.Duration(guestSeconds(t, 3)) * time.Second
		tb := tools.New(s, tools.Options{OperationTimeout: timeout})
		ws := s.Paths().Workspace
		sh(t, s, `mkfifo blocked`)
		ctx, cancel := context.WithTimeout(context.Background(), 20*timeout)
		defer cancel()
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := tb.Call(ctx, "grep", json.RawMessage(fmt.Sprintf(`{"pattern": "x", "path": %q}`, ws+"/blocked")), nil)
			done <- err
		}()
		parent := ""
		var err error
	watch:
		for parent == "" {
			select {
			case err = <-done:
				break watch
			default:
				parent = sh(t, s, rgParent, ws+"/blocked")
			}
		}
		if parent != "" {
			err = <-done
		}
		assert.EqualError(t, err, fmt.Sprintf("Grep timed out after %d seconds", timeout/time.Second))
		switch {
		case onBackend(t, "local") && !sharesSandbox(s), onBackend(t, "local-per-call"):
			// Each call has a sandbox of its own, which others cannot see.
		case agentOutOfSight(t, s):
			assert.Equal(t, "out of sight\n", parent, "the grep-search builtin starts rg, from the agent out of its sight")
		default:
			// "agent" in a sandbox; the host stand-in's agent is the test
			// program, started through /proc/self/exe.
			assert.Contains(t, []string{"agent\n", "exe\n"}, parent, "the grep-search builtin starts rg")
		}
		assert.Less(t, time.Since(start), 7*timeout)
		assert.False(t, s.Poisoned())
	})
}

// A search's cleanup that ends without a word is sent again, twice at
// most: the search's processes die and the session stays usable. A third
// wordless end gives the session up.
func TestSearchCleanupEndingWithoutAWordIsSentAgain(t *testing.T) {
	for _, wordless := range []int32{1, 2, 3} {
		t.Run(fmt.Sprint(wordless), func(t *testing.T) {
			s, _ := openMsbChannel(t)
			w := &wordlessCleanup{Session: s, wordless: wordless, isCleanup: func(c session.Command) bool { return c.Builtin == agentwire.BuiltinSearchKill }}
			tb := tools.New(w, tools.Options{OperationTimeout: time.Second})
			sh(t, s, `mkfifo blocked`)
			_, err := tb.Call(context.Background(), "grep", json.RawMessage(fmt.Sprintf(`{"pattern": "x", "path": %q}`, s.Paths().Workspace+"/blocked")), nil)
			if wordless == 3 {
				assert.ErrorContains(t, err, "grep cleanup: guest processes survived (exit 255)")
				assert.EqualValues(t, 3, w.cleanups.Load(), "the cleanup was sent three times")
				assert.True(t, s.Poisoned())
				return
			}
			assert.EqualError(t, err, "Grep timed out after 1 seconds")
			assert.EqualValues(t, wordless+1, w.cleanups.Load(), "the cleanup was sent until it had its say")
			assert.False(t, s.Poisoned())
			assert.Equal(t, "", sh(t, s, rgParent, s.Paths().Workspace+"/blocked"), "the search's rg is gone")
		})
	}
}

// Parallel calls of every kind on one session each get their own result;
// searches tolerate the writes running beside them; nothing of the tools'
// own shows in any result or is left behind.
func TestParallelMixedCalls(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		// 24 calls at once on a loaded machine, or in a microVM under
		// emulation beside another: a generous timeout, since this test is
		// about isolation, not speed (with one minute, a grep among them
		// once ended there before rg started, as a call out of time does).
		tb := tools.New(s, tools.Options{OperationTimeout: 5 * time.Minute})
		ws := s.Paths().Workspace
		sh(t, s, `mkdir -p p && for i in $(seq 0 11); do printf 'needle %s\n' "$i" > "p/base$i.txt"; done`)
		type result struct {
			what, out string
			err       error
		}
		run := func(n int, job func(i int) (string, string, error)) []result {
			out := make([]result, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					what, text, err := job(i)
					out[i] = result{what, text, err}
				}()
			}
			wg.Wait()
			return out
		}
		check := func(results []result) {
			for _, r := range results {
				if assert.NoError(t, r.err, r.what) {
					assert.NotContains(t, r.out, ".oma-", r.what)
				}
			}
		}
		for round := range 3 {
			results := run(24, func(i int) (string, string, error) {
				name := fmt.Sprintf("p/r%d-%d.txt", round, i)
				var in obj
				tool := ""
				switch i % 8 {
				case 0:
					tool, in = "write", obj{"path": name, "content": "needle " + name + "\n"}
				case 1:
					tool, in = "read", obj{"path": fmt.Sprintf("p/base%d.txt", i%12)}
				case 2:
					tool, in = "grep", obj{"pattern": "needle", "path": ws + "/p"}
				case 3:
					tool, in = "glob", obj{"pattern": "p/*.txt"}
				case 4:
					tool, in = "ls", obj{"path": "p"}
				case 5:
					tool, in = "edit", obj{"path": fmt.Sprintf("p/base%d.txt", i%12), "oldText": "needle", "newText": "needle!"}
				case 6:
					tool, in = "bash", obj{"command": fmt.Sprintf("echo call-%d-%d", round, i)}
				case 7:
					tool, in = "write", obj{"path": name, "content": strings.Repeat("x", 1<<16)}
				}
				out, err := call(t, tb, tool, in)
				what := fmt.Sprintf("round %d call %d: %s %v", round, i, tool, in["path"])
				switch {
				case err != nil:
				case tool == "read":
					assert.Regexp(t, fmt.Sprintf(`^needle!* %d\n$`, i%12), out, what)
				case tool == "bash":
					assert.Equal(t, fmt.Sprintf("call-%d-%d\n", round, i), out, what)
				case tool == "write":
					assert.Contains(t, out, "Successfully wrote", what)
				}
				return what, out, err
			})
			check(results)
		}
		// A burst of writes beside searches of the same directory: 24 at
		// once, 8 on a real VM (24 msb execs at once on one emulated CPU
		// outlast a search's operation timeout before it is ready).
		burst := 24
		if onRealVM(t) {
			burst = 8
		}
		results := run(burst, func(i int) (string, string, error) {
			var tool string
			var in obj
			switch i % 4 {
			case 0, 1:
				tool, in = "write", obj{"path": fmt.Sprintf("p/burst%d.txt", i), "content": "needle\n"}
			case 2:
				tool, in = "grep", obj{"pattern": "needle", "path": ws + "/p"}
			case 3:
				tool, in = "glob", obj{"pattern": "*.txt", "path": "p"}
			}
			out, err := call(t, tb, tool, in)
			return fmt.Sprintf("burst call %d: %s", i, tool), out, err
		})
		check(results)
		assert.Equal(t, "", sh(t, s, `find . -name '.oma-write.*'`), "no temp file left")
		assert.False(t, s.Poisoned())
	})
}

// glob lists .git's insides only when the pattern names .git, and a file
// name pattern keeps a large dependency tree out of the enumeration.
func TestGlobNarrowsItsWalk(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		sh(t, s, `mkdir -p .git/objects calc/sub && touch .git/HEAD .git/objects/ab calc/a.py calc/sub/b.py calc/c.txt && `+deepFiles("node_modules/dep", 400, ".js"))
		assert.ElementsMatch(t, []string{"calc/a.py", "calc/sub/b.py"}, strings.Split(mustCall(t, tb, "glob", obj{"pattern": "calc/**/*.py"}), "\n"))
		assert.Equal(t, "calc/c.txt", mustCall(t, tb, "glob", obj{"pattern": "**/*.txt"}))
		assert.ElementsMatch(t, []string{".git/HEAD", ".git/objects/ab"}, strings.Split(mustCall(t, tb, "glob", obj{"pattern": "*", "path": ".git"}), "\n"))
		assert.ElementsMatch(t, []string{".git/HEAD", ".git/objects/ab"}, strings.Split(mustCall(t, tb, "glob", obj{"pattern": ".git/**"}), "\n"))
		assert.ElementsMatch(t, []string{"calc/a.py", "calc/sub/b.py", "calc/c.txt"}, strings.Split(mustCall(t, tb, "glob", obj{"pattern": "calc/**"}), "\n"),
			"a leading directory name narrows the walk too")
	})
}

// An ls while other calls create and remove files in the directory (a
// write's temporary file lives there for an instant) lists what is there;
// an entry gone between find's read of the directory and its stat is not
// an error.
func TestLsWhileEntriesVanish(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		sh(t, s, `mkdir -p churn && touch churn/keep && rm -f churn.stop churn.started`)
		churned := make(chan error, 1)
		go func() {
			// The churn goes on until the listings are done (or its cap).
			_, err := s.Shell(context.Background(), session.Command{Script: `end=$((SECONDS + $1))
: > churn.started
for k in 1 2 3; do
  while [ ! -e churn.stop ] && [ "$SECONDS" -lt "$end" ]; do for i in 1 2 3 4 5 6 7 8; do : > "churn/x$k$i"; rm -f "churn/x$k$i"; done; done &
done
wait`, Args: []string{strconv.Itoa(guestSeconds(t, 60))}}, session.ShellOptions{GuestTimeout: time.Duration(guestSeconds(t, 90)) * time.Second})
			churned <- err
		}()
		require.Eventually(t, func() bool { return sh(t, s, `[ -e churn.started ] && echo y || true`) == "y\n" },
			time.Duration(guestSeconds(t, 10))*time.Second, 20*time.Millisecond, "the churn began")
		for n := range 25 {
			out, err := call(t, tb, "ls", obj{"path": "churn"})
			require.NoError(t, err, "listing %d", n)
			require.Contains(t, out, "keep")
		}
		sh(t, s, `: > churn.stop`)
		require.NoError(t, <-churned)
	})
}
