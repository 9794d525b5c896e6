package tools_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/glob"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// sh runs a setup or inspection script in the session: within the
// session's operation timeout, or ten minutes on a real VM, where a
// script making thousands of files under emulation takes minutes.
func sh(t *testing.T, s session.Session, script string, args ...string) string {
	t.Helper()
	var o session.ShellOptions
	if onRealVM(t) {
		o.GuestTimeout = 10 * time.Minute
	}
	res, err := s.Shell(context.Background(), session.Command{Script: script, Args: args}, o)
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s: %s", script, res.Stderr)
	return string(res.Stdout)
}

// deepFiles is a script making n empty files, named fN plus ext, 14
// directories of 230 bytes below dir: each path over 3 KB, so that a few
// hundred of them pass an enumeration's byte limit. Thousands of short
// names did the same, but made on an msb volume under emulation they took
// over three minutes.
func deepFiles(dir string, n int, ext string) string {
	return fmt.Sprintf(`seg=$(printf 'n%%.0s' $(seq 1 230)) && d=%q/$(printf "$seg/%%.0s" $(seq 1 14)) && mkdir -p "$d" && cd "$d" && for i in $(seq 1000 %d); do : > "f$i%s"; done`,
		dir, 999+n, ext)
}

// tagged counts live processes whose environment carries a tool's owner tag.
func tagged(t *testing.T, s session.Session, env string) string {
	return sh(t, s, `n=0; for e in /proc/[0-9]*/environ; do tr '\0' '\n' < "$e" 2>/dev/null | grep -q "^$1=" && n=$((n+1)); done; echo $n`, env)
}

func TestGlob(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		ws := s.Paths().Workspace
		sh(t, s, `mkdir -p docs/sub/deep x/docs && touch a.md .hidden.md docs/b.md docs/sub/c.md docs/sub/deep/d.md x/docs/e.md docs/f.txt`)

		before := calls()
		out := mustCall(t, tb, "glob", obj{"pattern": "docs/*.md"})
		assert.Equal(t, 1, calls()-before, "a normal glob is one round trip")
		assert.ElementsMatch(t, []string{"docs/b.md", "x/docs/e.md"}, strings.Split(out, "\n"))

		out = mustCall(t, tb, "glob", obj{"pattern": "*.md", "path": "docs"})
		assert.ElementsMatch(t, []string{"docs/b.md", "docs/sub/c.md", "docs/sub/deep/d.md"}, strings.Split(out, "\n"))

		out = mustCall(t, tb, "glob", obj{"pattern": "{a,.hidden}.md", "path": ws})
		assert.ElementsMatch(t, []string{ws + "/a.md", ws + "/.hidden.md"}, strings.Split(out, "\n"))

		assert.Equal(t, "No files found", mustCall(t, tb, "glob", obj{"pattern": "*.nothing"}))

		before = calls()
		_, err := call(t, tb, "glob", obj{"pattern": "[z-a]"})
		assert.ErrorIs(t, err, tools.ErrInvalidInput)
		assert.Contains(t, err.Error(), "Invalid glob pattern: ")
		_, err = call(t, tb, "glob", obj{"pattern": "*", "path": "/etc"})
		assert.ErrorIs(t, err, tools.ErrPathEscape)
		assert.Equal(t, 0, calls()-before, "refused globs reach no sandbox")

		_, err = call(t, tb, "glob", obj{"pattern": "*", "path": "missing"})
		require.Error(t, err, "a missing path after readiness is an ordinary error")
		assert.False(t, s.Poisoned(), "and keeps the session")
	})
}

// 150 files: exactly 100 paths, and the guest work is ended afterwards.
func TestGlobStopsAtHundred(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		sh(t, s, `mkdir many && cd many && for i in $(seq 1 150); do : > "f$i.txt"; done`)
		before := calls()
		out := mustCall(t, tb, "glob", obj{"pattern": "many/*.txt"})
		paths, note, _ := strings.Cut(out, "\n\n")
		assert.Len(t, strings.Split(paths, "\n"), 100)
		assert.Equal(t, "[Showing the first 100 results; more match. Narrow the pattern, or set path to a subdirectory.]", note)
		assert.Equal(t, 2, calls()-before, "capped: the enumeration and its cleanup")
		assert.Equal(t, "0\n", tagged(t, s, "OMA_GLOB_OWNER"), "no tagged process remains")
		assert.False(t, s.Poisoned())
	})
}

func TestGlobByteLimits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		// 400 paths of about 3.5 KB: over 1 MiB of enumeration, no match.
		sh(t, s, deepFiles("raw", 400, ""))
		_, err := call(t, tb, "glob", obj{"pattern": "[z]*", "path": "raw"})
		assert.EqualError(t, err, `Glob enumeration exceeds 1048576 raw bytes. Narrow the search: set path to the directory to search (e.g. {"path": "src"}), or end the pattern with a file name pattern such as *.py.`)
		assert.ErrorIs(t, err, glob.ErrLimit)
		assert.Equal(t, "No files found", mustCall(t, tb, "glob", obj{"pattern": "*.none", "path": "raw"}),
			"a file name pattern narrows what the guest lists")

		// 100 matches of ~700 bytes each: over 64 KiB of output.
		sh(t, s, `seg=$(printf 's%.0s' $(seq 1 230)); d="wide/$seg/$seg/$seg"; mkdir -p "$d" && cd "$d" && for i in $(seq 100 199); do : > "$i.w"; done`)
		_, err = call(t, tb, "glob", obj{"pattern": "*.w", "path": "wide"})
		assert.EqualError(t, err, `Glob output exceeds 65536 bytes. Narrow the search: set path to the directory to search (e.g. {"path": "src"}), or end the pattern with a file name pattern such as *.py.`)
		assert.Equal(t, "0\n", tagged(t, s, "OMA_GLOB_OWNER"))
		assert.False(t, s.Poisoned())
	})
}

func TestGrep(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		ws := s.Paths().Workspace
		sh(t, s, `mkdir -p src/a node_modules && printf 'needle\n' > src/a/x.go && printf 'needle\n' > src/y.txt &&
printf 'hay\n' > src/z.go && printf 'needle\0bin' > src/bin.dat && printf 'needle\n' > node_modules/m.go && printf 'needle\n' > .dot.go &&
printf 'needle\n%70000s\0bin' '' > src/far.dat && mkfifo src/fifo.go && ln -s ../.dot.go src/link.go`)

		before := calls()
		out := mustCall(t, tb, "grep", obj{"pattern": "need+le", "path": ws})
		assert.Equal(t, 1, calls()-before, "a normal grep is one round trip")
		assert.ElementsMatch(t, []string{ws + "/src/a/x.go", ws + "/src/y.txt", ws + "/node_modules/m.go", ws + "/.dot.go"},
			strings.Split(out, "\n"), "binary files (even with the NUL far behind the match) are skipped; hidden and ignored ones are searched; FIFOs and symbolic links below path are not opened")
		assert.Equal(t, "No matches found", mustCall(t, tb, "grep", obj{"pattern": "needle", "path": ws + "/src/far.dat"}), "a binary file as path")

		out = mustCall(t, tb, "grep", obj{"pattern": "needle", "path": ws + "/src", "glob": "*.go"})
		assert.Equal(t, ws+"/src/a/x.go", out)
		out = mustCall(t, tb, "grep", obj{"pattern": "needle", "path": ws, "glob": "{src/{a,b}/*.go,.dot.*}"})
		assert.ElementsMatch(t, []string{ws + "/src/a/x.go", ws + "/.dot.go"}, strings.Split(out, "\n"), "nested braces work")
		out = mustCall(t, tb, "grep", obj{"pattern": "needle", "path": ws, "head_limit": 1, "context": 3})
		assert.Equal(t, ws+"/.dot.go\n\n[Showing the first 1 results; more match. Raise head_limit (at most 100), or narrow path or glob.]", out)
		assert.Equal(t, "No matches found", mustCall(t, tb, "grep", obj{"pattern": "absent", "path": ws}))
		assert.Equal(t, "0\n", tagged(t, s, "OMA_GREP_OWNER"))

		before = calls()
		for input, want := range map[string]string{
			`{"path": "/workspace"}`:                                "grep pattern is required",
			`{"pattern": "", "path": "/workspace"}`:                 "grep pattern is required",
			`{"pattern": "x", "path": "rel"}`:                       "grep path must be absolute",
			`{"pattern": "x"}`:                                      "grep path must be absolute",
			`{"pattern": "x", "path": "/w", "head_limit": 0}`:       "grep head_limit must be an integer from 1 through 100",
			`{"pattern": "x", "path": "/w", "head_limit": 101}`:     "grep head_limit must be an integer from 1 through 100",
			`{"pattern": "x", "path": "/w", "context": -1}`:         "grep context must be an integer from 0 through 100",
			`{"pattern": "x", "path": "/w", "glob": ""}`:            "grep glob must be a non-empty string",
			`{"pattern": "x", "path": "/w", "glob": 3}`:             "grep glob must be a non-empty string",
			`{"pattern": "x", "path": "` + ws + `", "glob": "a\\"}`: "Invalid glob pattern: trailing escape",
			`{"pattern": "x", "path": "/etc"}`:                      `grep: path "/etc" escapes ` + ws + ", " + s.Paths().Uploads + ", " + s.Paths().Skills,
		} {
			_, err := tb.Call(context.Background(), "grep", []byte(input), nil)
			require.Error(t, err, input)
			assert.Equal(t, want, err.Error(), input)
			assert.ErrorIs(t, err, tools.ErrInvalidInput, input)
		}
		assert.Equal(t, 0, calls()-before, "invalid grep input reaches no sandbox")
	})
}

func TestParallelSearchesKeepTheirOwnWork(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		sh(t, s, `mkdir p && cd p && for i in $(seq 1 300); do echo needle > "f$i"; done`)
		errs := make(chan error, 6)
		for i := 0; i < 6; i++ {
			go func() {
				var err error
				if i%2 == 0 {
					_, err = tb.Call(context.Background(), "glob", []byte(`{"pattern": "p/*"}`), nil)
				} else {
					_, err = tb.Call(context.Background(), "grep", []byte(fmt.Sprintf(`{"pattern": "needle", "path": %q}`, s.Paths().Workspace+"/p")), nil)
				}
				errs <- err
			}()
		}
		for i := 0; i < 6; i++ {
			assert.NoError(t, <-errs)
		}
		assert.False(t, s.Poisoned())
	})
}
