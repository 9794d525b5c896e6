//go:build unix

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// guestStub is a session whose first Shell call answers with whatever a
// broken or hostile guest could print, delivered in arbitrary chunks when
// streamed, and its output cap enforced as the backends do; later calls (a
// search's cleanup, an edit's write, bash's kill) succeed silently.
type guestStub struct {
	stdout   []byte
	exit     int
	seed     uint64
	calls    int
	poisoned bool
}

var _ session.Session = (*guestStub)(nil)

func (g *guestStub) Name() string { return "stub" }

func (g *guestStub) Paths() session.Paths {
	return session.Paths{Workspace: "/workspace", Uploads: "/mnt/session/uploads", Outputs: "/mnt/session/outputs", Skills: "/workspace/skills"}
}

func (g *guestStub) CopyIn(context.Context, string, string) error { return nil }
func (g *guestStub) Poisoned() bool                               { return g.poisoned }
func (g *guestStub) Close(context.Context) error                  { return nil }

func (g *guestStub) Poison(context.Context, error) error {
	g.poisoned = true
	return session.ErrPoisoned
}

func (g *guestStub) Shell(_ context.Context, _ session.Command, opts session.ShellOptions) (*session.Result, error) {
	g.calls++
	if g.calls > 1 {
		return &session.Result{}, nil
	}
	out, err := g.stdout, error(nil)
	if opts.Stdin != nil {
		// bash's supervisor reads its call's secret from the first line of
		// stdin; the fuzzer's "tok" stands for it, so the sentinel parser
		// sees records it can believe.
		in, _ := io.ReadAll(opts.Stdin)
		if secret, _, ok := bytes.Cut(in, []byte("\n")); ok {
			out = bytes.ReplaceAll(out, []byte("tok"), secret)
		}
	}
	if opts.MaxOutput > 0 && int64(len(out)) > opts.MaxOutput {
		out, err = out[:opts.MaxOutput], session.ErrOutputOverflow
	}
	if opts.Stdout == nil {
		return &session.Result{ExitCode: g.exit, Stdout: out}, err
	}
	rng := rand.New(rand.NewPCG(g.seed, 0))
	for len(out) > 0 {
		n := 1 + rng.IntN(len(out))
		opts.Stdout(slices.Clone(out[:n]))
		out = out[n:]
	}
	return &session.Result{ExitCode: g.exit}, err
}

// fuzzCalls are the tool calls FuzzToolGuestOutput feeds guest output to.
var fuzzCalls = []struct {
	tool, input string
	// paths, for glob and grep, checks one result line.
	paths func(line string) bool
}{
	{"read", `{"path":"f.txt"}`, nil},
	{"ls", `{"path":"d"}`, nil},
	{"edit", `{"path":"f.txt","oldText":"alpha","newText":"beta"}`, nil},
	{"bash", `{"command":"true"}`, nil},
	{"glob", `{"pattern":"**/*.go"}`, func(l string) bool { return local(l) && strings.HasSuffix(l, ".go") }},
	{"glob", `{"pattern":"*","path":"/workspace/sub"}`, func(l string) bool { return under(l, "/workspace/sub") }},
	{"grep", `{"pattern":"x","path":"/workspace"}`, func(l string) bool { return under(l, "/workspace") }},
	// The root itself, listed when it is a file, is not matched against
	// the glob.
	{"grep", `{"pattern":"x","path":"/workspace/skills","glob":"*.md"}`, func(l string) bool {
		return l == "/workspace/skills" || under(l, "/workspace/skills") && strings.HasSuffix(l, ".md")
	}},
}

// local reports whether p is a clean relative path that stays below its base.
func local(p string) bool {
	return p != "" && !path.IsAbs(p) && path.Clean(p) == p && p != ".." && !strings.HasPrefix(p, "../")
}

// under reports whether p is root or a clean path below it.
func under(p, root string) bool {
	return p == root || strings.HasPrefix(p, root+"/") && path.Clean(p) == p
}

// FuzzToolGuestOutput hands arbitrary guest output and exit status to each
// tool's parser of it (read's header and lines, ls's records, edit's file
// content, bash's sentinels, the glob and grep streams) through a stub
// session. No output may panic them; a result must stay within the tool's
// size limit; and every path glob or grep returns must stay inside the
// searched root, matching the pattern, however the guest lies.
func FuzzToolGuestOutput(f *testing.F) {
	// Each seed goes to the tool whose parser it speaks to (its index in
	// fuzzCalls); the last speaks to none and goes to every tool.
	seeds := []struct {
		call   int
		stdout string
	}{
		{0, "3 5\nhello\nworld\nlast"},
		{0, "1 0\n"},
		{0, "9999999999999999999 1\nx"},
		{1, "f file.txt\x00d sub\x00l link\x00f a/b\x00"},
		{2, "alpha gamma\n"},
		{3, "__OMA_DISPATCHED__:tok\nhi\n__OMA_TERMINAL__:tok:exit:0\n"},
		{4, "__OMA_GLOB_READY__\x00./a.go\x00./b/c.go\x00./../x.go\x00./d/e.txt\x00"},
		{5, "__OMA_GLOB_READY__\x00./sub/x\x00"},
		{6, "__OMA_GREP_READY__\x00/workspace/a.txt\x00/workspace/../etc/passwd\x00/other\x00"},
		{7, "__OMA_GREP_READY__\x00/workspace/skills/x/SKILL.md\x00/workspace/skills/y.txt\x00"},
		{4, "__OMA_GLOB_READY__\x00./a\x02.go\x00./b\nc.go\x00"},
		{6, "__OMA_GREP_READY__\x00/workspace/a\x02b\x00"},
	}
	for i, s := range seeds {
		if !strings.Contains(s.stdout, "READY") == (fuzzCalls[s.call].paths != nil) {
			f.Fatalf("seed %d does not fit %s", i, fuzzCalls[s.call].tool)
		}
		f.Add(uint8(s.call), []byte(s.stdout), 0, uint64(i))
	}
	for call := range fuzzCalls {
		f.Add(uint8(call), []byte(strings.Repeat("z", 300)), 0, uint64(call))
	}
	f.Add(uint8(0), []byte("2 3\nabc\ndef"), 3, uint64(7))
	f.Add(uint8(3), []byte("partial"), -1, uint64(8))
	f.Fuzz(func(t *testing.T, which uint8, stdout []byte, exit int, seed uint64) {
		c := fuzzCalls[int(which)%len(fuzzCalls)]
		stub := &guestStub{stdout: stdout, exit: exit, seed: seed}
		out, err := tools.New(stub, tools.Options{}).Call(context.Background(), c.tool, json.RawMessage(c.input), nil)
		if err != nil {
			return
		}
		if len(out) > 64<<10+512 {
			t.Fatalf("%s result of %d bytes", c.tool, len(out))
		}
		if c.paths == nil {
			return
		}
		// The paths, then after a blank line the bracketed notes on
		// truncation and on what could not be searched.
		paths, notes, _ := strings.Cut(out, "\n\n")
		for note := range strings.SplitSeq(notes, "\n") {
			if note != "" && !strings.HasPrefix(note, "[Showing the first ") && !strings.HasPrefix(note, "[Could not search: ") {
				t.Fatalf("%s %s returned the note %q", c.tool, c.input, note)
			}
		}
		if paths == "No files found" || paths == "No matches found" {
			return
		}
		for line := range strings.SplitSeq(paths, "\n") {
			// A name with control characters is shown as a Go string.
			if unquoted, err := strconv.Unquote(line); err == nil && strings.HasPrefix(line, `"`) {
				line = unquoted
			}
			if !c.paths(line) {
				t.Fatalf("%s %s returned %q", c.tool, c.input, line)
			}
		}
	})
}
