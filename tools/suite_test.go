package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// backend opens a fresh session and reports how many sandbox round trips
// (msb invocations, or Shell calls) have happened so far.
type backend struct {
	name string
	open func(t *testing.T) (session.Session, func() int)
}

func forEachBackend(t *testing.T, fn func(t *testing.T, s session.Session, calls func() int)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s, calls := b.open(t)
			fn(t, s, calls)
		})
	}
}

func call(t *testing.T, tb *tools.Toolbox, name string, input any) (string, error) {
	t.Helper()
	raw, err := json.Marshal(input)
	require.NoError(t, err)
	return tb.Call(context.Background(), name, raw, nil)
}

func mustCall(t *testing.T, tb *tools.Toolbox, name string, input any) string {
	t.Helper()
	out, err := call(t, tb, name, input)
	require.NoError(t, err, "%s %v", name, input)
	return out
}

type obj = map[string]any

func TestWriteReadRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		before := calls()
		out := mustCall(t, tb, "write", obj{"path": "dir/sub/a.txt", "content": "hello\nworld\n"})
		assert.Equal(t, "Successfully wrote 12 bytes to dir/sub/a.txt", out)
		assert.Equal(t, 1, calls()-before, "write is one round trip")

		before = calls()
		out = mustCall(t, tb, "read", obj{"path": s.Paths().Workspace + "/dir/sub/a.txt"})
		assert.Equal(t, "hello\nworld\n", out)
		assert.Equal(t, 1, calls()-before, "read is one round trip")
	})
}

func TestReadPaging(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		var lines []string
		for i := 1; i <= 2500; i++ {
			lines = append(lines, fmt.Sprintf("line %d", i))
		}
		mustCall(t, tb, "write", obj{"path": "big.txt", "content": strings.Join(lines, "\n")})

		out := mustCall(t, tb, "read", obj{"path": "big.txt"})
		assert.True(t, strings.HasPrefix(out, "line 1\nline 2\n"))
		assert.True(t, strings.HasSuffix(out, "line 2000\n\n[Showing lines 1-2000 of 2500. Use offset=2001 to continue.]"), out[len(out)-120:])

		out = mustCall(t, tb, "read", obj{"path": "big.txt", "offset": 2001})
		assert.True(t, strings.HasPrefix(out, "line 2001\n"))
		assert.True(t, strings.HasSuffix(out, "line 2500"))

		out = mustCall(t, tb, "read", obj{"path": "big.txt", "offset": 10, "limit": 3})
		assert.Equal(t, "line 10\nline 11\nline 12\n\n[2488 more lines in file. Use offset=13 to continue.]", out)

		_, err := call(t, tb, "read", obj{"path": "big.txt", "offset": 2501})
		assert.EqualError(t, err, "Offset 2501 is beyond end of file (2500 lines total)")
	})
}

func TestReadByteLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		line := strings.Repeat("x", 99)
		var lines []string
		for i := 0; i < 1000; i++ {
			lines = append(lines, line)
		}
		mustCall(t, tb, "write", obj{"path": "wide.txt", "content": strings.Join(lines, "\n")})
		out := mustCall(t, tb, "read", obj{"path": "wide.txt"})
		// 512 lines of 100 bytes (99 + newline) fit in 50KB.
		assert.True(t, strings.HasSuffix(out, "\n\n[Showing lines 1-512 of 1000 (50.0KB limit). Use offset=513 to continue.]"), out[len(out)-100:])

		mustCall(t, tb, "write", obj{"path": "long.txt", "content": "short\n" + strings.Repeat("y", 60*1024) + "\n"})
		out = mustCall(t, tb, "read", obj{"path": "long.txt", "offset": 2})
		assert.Equal(t, "[Line 2 is 60.0KB, exceeds 50.0KB limit. Use bash: sed -n '2p' long.txt | head -c 51200]", out)
	})
}

func TestReadErrors(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		_, err := call(t, tb, "read", obj{"path": "missing.txt"})
		assert.EqualError(t, err, "File not found: missing.txt")
		assert.True(t, tools.IsGuestError(err))
		_, err = call(t, tb, "read", obj{"path": "."})
		assert.EqualError(t, err, "Path is a directory: .")
	})
}

func TestEdit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		mustCall(t, tb, "write", obj{"path": "e.txt", "content": "alpha\nbeta\ngamma\nbeta2\n"})

		before := calls()
		out := mustCall(t, tb, "edit", obj{"path": "e.txt", "edits": []obj{
			{"oldText": "gamma", "newText": "GAMMA"}, {"oldText": "alpha\n", "newText": ""},
		}})
		assert.Equal(t, "Successfully replaced 2 block(s) in e.txt.", out)
		assert.LessOrEqual(t, calls()-before, 2, "edit is at most two round trips")
		assert.Equal(t, "beta\nGAMMA\nbeta2\n", mustCall(t, tb, "read", obj{"path": "e.txt"}))

		out = mustCall(t, tb, "edit", obj{"path": "e.txt", "oldText": "GAMMA", "newText": "g"})
		assert.Equal(t, "Successfully replaced 1 block(s) in e.txt.", out)

		cases := []struct {
			edits []obj
			want  string
		}{
			{[]obj{{"oldText": "nope", "newText": "x"}}, "Could not edit file: e.txt. Edit 1: oldText was not found. It must match the file exactly, including whitespace and newlines."},
			{[]obj{{"oldText": "g", "newText": "x"}, {"oldText": "beta", "newText": "x"}}, "Could not edit file: e.txt. Edit 2: oldText occurs 2 times; it must occur exactly once. Add surrounding text to make it unique."},
			{[]obj{{"oldText": "beta\ng", "newText": "x"}, {"oldText": "g\nbeta2", "newText": "y"}}, "Could not edit file: e.txt. Edits 1 and 2 overlap."},
			{[]obj{{"oldText": "", "newText": "x"}}, "Could not edit file: e.txt. Edit 1: oldText must not be empty."},
		}
		for _, c := range cases {
			_, err := call(t, tb, "edit", obj{"path": "e.txt", "edits": c.edits})
			assert.EqualError(t, err, c.want)
		}
		assert.Equal(t, "beta\ng\nbeta2\n", mustCall(t, tb, "read", obj{"path": "e.txt"}), "failed edits change nothing")

		// An empty oldText is bad input, refused before the file is read.
		before = calls()
		_, err := call(t, tb, "edit", obj{"path": "e.txt", "edits": []obj{{"oldText": "g", "newText": "x"}, {"oldText": "", "newText": "x"}}})
		assert.EqualError(t, err, "Could not edit file: e.txt. Edit 2: oldText must not be empty.")
		var editErr *tools.EditError
		assert.ErrorIs(t, err, tools.ErrInvalidInput)
		assert.False(t, errors.As(err, &editErr), "an empty oldText is not an edit that did not fit the file")
		assert.Equal(t, before, calls(), "an empty oldText reaches no guest")

		_, err = call(t, tb, "edit", obj{"path": "none.txt", "edits": []obj{{"oldText": "a", "newText": "b"}}})
		assert.EqualError(t, err, "Could not edit file: none.txt. File not found: none.txt")
	})
}

// Concurrent edits of one file from separate Toolboxes (which share no
// lock) never lose an update: each either lands or reports that the file
// changed under it.
func TestEditLostUpdate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		const n = 8
		var content strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&content, "token-%d\n", i)
		}
		mustCall(t, tb, "write", obj{"path": "race.txt", "content": content.String()})
		var wg sync.WaitGroup
		results := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, results[i] = call(t, tools.New(s, tools.Options{}), "edit", obj{"path": "race.txt", "edits": []obj{
					{"oldText": fmt.Sprintf("token-%d\n", i), "newText": fmt.Sprintf("DONE-%d\n", i)},
				}})
			}()
		}
		wg.Wait()
		final := mustCall(t, tb, "read", obj{"path": "race.txt"})
		landed := 0
		for i, err := range results {
			done := strings.Contains(final, fmt.Sprintf("DONE-%d\n", i))
			if err == nil {
				landed++
				assert.True(t, done, "edit %d reported success but is not in the file", i)
			} else {
				assert.False(t, done, "edit %d failed but landed", i)
				assert.Contains(t, err.Error(), "changed while the edit was applied")
			}
		}
		assert.GreaterOrEqual(t, landed, 1)
	})
}

func TestLs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		assert.Equal(t, "(empty directory)", mustCall(t, tb, "ls", obj{}))
		for _, f := range []string{"b.txt", "A.txt", ".env", "dir/x", "C/y"} {
			mustCall(t, tb, "write", obj{"path": f, "content": "x"})
		}
		before := calls()
		assert.Equal(t, ".env\nA.txt\nb.txt\nC/\ndir/", mustCall(t, tb, "ls", obj{}))
		assert.Equal(t, 1, calls()-before, "ls is one round trip")
		assert.Equal(t, ".env\nA.txt\n\n[2 entries limit reached. Use limit=4 for more]", mustCall(t, tb, "ls", obj{"limit": 2}))
		assert.Equal(t, "x", mustCall(t, tb, "ls", obj{"path": "dir"}))
		_, err := call(t, tb, "ls", obj{"path": "nope"})
		assert.EqualError(t, err, "Path not found: nope")
		_, err = call(t, tb, "ls", obj{"path": "b.txt"})
		assert.EqualError(t, err, "Not a directory: b.txt")
	})
}

func TestRefusedBeforeAnyRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		ws := s.Paths().Workspace
		cases := []struct {
			tool  string
			input string
			want  string
			esc   bool
		}{
			{"read", `{"path": "../etc/passwd"}`, `read: path "../etc/passwd" escapes ` + ws + ", " + s.Paths().Uploads, true},
			{"read", `{"path": "/etc/passwd"}`, `read: path "/etc/passwd" escapes ` + ws + ", " + s.Paths().Uploads, true},
			{"write", `{"path": "` + ws + `-escape/x", "content": ""}`, `write: path "` + ws + `-escape/x" escapes ` + ws, true},
			{"edit", `{"path": "a/../../x", "edits": [{"oldText": "a", "newText": "b"}]}`, `edit: path "a/../../x" escapes ` + ws, true},
			{"ls", `{"path": ".."}`, `ls: path ".." escapes ` + ws + ", " + s.Paths().Uploads, true},
			{"read", `{"path": ""}`, "read: path must not be empty", false},
			{"read", `{"path": "a\u0000b"}`, "read: path must not contain NUL bytes", false},
			{"read", `{}`, "read: path is required", false},
			{"read", `{"path": 3}`, "read: path must be a string", false},
			{"read", `{"path": "a", "offset": 1.5}`, "read: offset must be an integer", false},
			{"read", `{"path": "a", "offset": -1}`, "read: offset must be an integer from 0 through 9007199254740992", false},
			{"read", `{"path": "a", "extra": 1}`, `read: unknown field "extra"`, false},
			{"read", `[1]`, "read input must be a JSON object", false},
			{"write", `{"path": "a"}`, "write: content is required", false},
			{"edit", `{"path": "a", "edits": [{"oldText": "a"}]}`, "edit: edits[0] needs both oldText and newText", false},
			{"edit", `{"path": "a", "edits": [{"oldText": "a", "newText": "b", "x": 1}]}`, "edit: edits[0] must be an object with string oldText and newText and nothing else", false},
			{"edit", `{"path": "a", "oldText": "a"}`, "edit: oldText and newText go together", false},
			{"edit", `{"path": "a"}`, "Could not edit file: a. No edits given.", false},
			{"ls", `{"limit": "5"}`, "ls: limit must be an integer", false},
		}
		before := calls()
		for _, c := range cases {
			_, err := tb.Call(context.Background(), c.tool, json.RawMessage(c.input), nil)
			require.Error(t, err, c.input)
			assert.Equal(t, c.want, err.Error(), c.input)
			assert.ErrorIs(t, err, tools.ErrInvalidInput, c.input)
			assert.Equal(t, c.esc, errors.Is(err, tools.ErrPathEscape), c.input)
		}
		_, err := tb.Call(context.Background(), "nope", nil, nil)
		assert.ErrorIs(t, err, tools.ErrUnknownTool)
		assert.Equal(t, 0, calls()-before, "refused input reaches no sandbox")
		assert.Empty(t, tb.Stats())
	})
}

func TestDefinitions(t *testing.T) {
	defs := tools.Definitions()
	names := make([]string, 0, len(defs))
	for _, d := range defs {
		names = append(names, d.Name)
		var schema map[string]any
		require.NoError(t, json.Unmarshal(d.InputSchema, &schema), d.Name)
		assert.Equal(t, "object", schema["type"])
		assert.Equal(t, false, schema["additionalProperties"], d.Name)
		assert.NotEmpty(t, d.Description)
	}
	assert.Subset(t, names, []string{"edit", "ls", "read", "write"})
}
