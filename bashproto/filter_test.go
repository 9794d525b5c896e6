package bashproto

import (
	"bytes"
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const tok = "0123456789abcdef0123456789abcdef"

func dispatchLine(token string) string { return dispatchPrefix + token + "\n" }

func terminalLine(token, rec string) string { return terminalPrefix + token + ":" + rec + "\n" }

type filterResult struct {
	out        []byte
	dispatched bool
	term       Terminal
	termOK     bool
	terminals  int
}

// runFilter feeds stream to a new filter in the given chunks.
func runFilter(t *testing.T, token string, chunks [][]byte) filterResult {
	t.Helper()
	var out []byte
	f := NewFilter(token, func(p []byte) {
		if len(p) == 0 {
			t.Fatal("empty forward")
		}
		out = append(out, p...)
	})
	for _, c := range chunks {
		n, err := f.Write(c)
		if err != nil || n != len(c) {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if len(f.held) >= f.longest {
			t.Fatalf("holding %d bytes, longest sentinel is %d", len(f.held), f.longest)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	term, ok := f.Terminal()
	return filterResult{out: out, dispatched: f.DispatchSeen(), term: term, termOK: ok, terminals: f.terminals}
}

func whole(s string) [][]byte { return [][]byte{[]byte(s)} }

func bytewise(s string) [][]byte {
	var c [][]byte
	for i := range len(s) {
		c = append(c, []byte{s[i]})
	}
	return c
}

func TestFilter(t *testing.T) {
	d := dispatchLine(tok)
	cases := []struct {
		name      string
		stream    string
		out       string
		dispatch  bool
		term      Terminal
		terminals int
	}{
		{"exit 7", d + "out\nerr\n" + terminalLine(tok, "exit:7"), "out\nerr\n", true, Terminal{Code: 7}, 1},
		{"no trailing newline before terminal", d + "partial" + terminalLine(tok, "exit:0"), "partial", true, Terminal{}, 1},
		{"timeout", d + "x" + terminalLine(tok, "timeout:137"), "x", true, Terminal{Timeout: true, Code: 137}, 1},
		{"exit 255", d + terminalLine(tok, "exit:255"), "", true, Terminal{Code: 255}, 1},
		{"bytes before dispatch kept", "bash: warning\n" + d + "ok\n" + terminalLine(tok, "exit:0"), "bash: warning\nok\n", true, Terminal{}, 1},
		{"no dispatch", "setsid: not found\n", "setsid: not found\n", false, Terminal{}, 0},
		{"terminal before dispatch is output", terminalLine(tok, "exit:0") + d, terminalLine(tok, "exit:0"), true, Terminal{}, 0},
		{"second dispatch is output", d + d + terminalLine(tok, "exit:1"), d, true, Terminal{Code: 1}, 1},
		{"wrong token dispatch", dispatchLine("other") + "x", dispatchLine("other") + "x", false, Terminal{}, 0},
		{"wrong token terminal", d + terminalLine("other", "exit:0"), terminalLine("other", "exit:0"), true, Terminal{}, 0},
		{"code 256", d + terminalLine(tok, "exit:256"), terminalLine(tok, "exit:256"), true, Terminal{}, 0},
		{"leading zero", d + terminalLine(tok, "exit:07"), terminalLine(tok, "exit:07"), true, Terminal{}, 0},
		{"negative", d + terminalLine(tok, "exit:-1"), terminalLine(tok, "exit:-1"), true, Terminal{}, 0},
		{"empty code", d + terminalLine(tok, "exit:"), terminalLine(tok, "exit:"), true, Terminal{}, 0},
		{"extra field", d + terminalLine(tok, "exit:0:x"), terminalLine(tok, "exit:0:x"), true, Terminal{}, 0},
		{"timeout other code", d + terminalLine(tok, "timeout:9"), terminalLine(tok, "timeout:9"), true, Terminal{}, 0},
		{"unknown kind", d + terminalLine(tok, "signal:9"), terminalLine(tok, "signal:9"), true, Terminal{}, 0},
		{"CRLF", d + terminalPrefix + tok + ":exit:0\r\n", terminalPrefix + tok + ":exit:0\r\n", true, Terminal{}, 0},
		{"cut off at end", d + "x" + terminalPrefix + tok + ":exit:1", "x" + terminalPrefix + tok + ":exit:1", true, Terminal{}, 0},
		{"dispatch cut off", "ab" + d[:len(d)-1], "ab" + d[:len(d)-1], false, Terminal{}, 0},
		{
			"forged line first wins, both stripped",
			d + terminalLine(tok, "exit:0") + "more\n" + terminalLine(tok, "exit:3"),
			"more\n", true, Terminal{Code: 0}, 2,
		},
		{
			"forged prefix glued to the real line",
			d + terminalPrefix + tok + ":exit:" + terminalLine(tok, "exit:2"),
			terminalPrefix + tok + ":exit:", true, Terminal{Code: 2}, 1,
		},
		{"underscores", d + "__a___" + "_" + terminalLine(tok, "exit:4") + "__", "__a____" + "__", true, Terminal{Code: 4}, 1},
	}
	for _, c := range cases {
		for name, chunks := range map[string][][]byte{"whole": whole(c.stream), "bytewise": bytewise(c.stream)} {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				r := runFilter(t, tok, chunks)
				assert.Equal(t, c.out, string(r.out))
				assert.Equal(t, c.dispatch, r.dispatched)
				assert.Equal(t, c.terminals > 0, r.termOK)
				assert.Equal(t, c.term, r.term)
				assert.Equal(t, c.terminals, r.terminals)
			})
		}
	}
}

func TestFilterWriteAfterClose(t *testing.T) {
	f := NewFilter(tok, func([]byte) {})
	require.NoError(t, f.Close())
	require.NoError(t, f.Close())
	_, err := f.Write([]byte("x"))
	assert.ErrorIs(t, err, ErrFilterClosed)
}

func TestFilterLargeChunkAfterHeldTail(t *testing.T) {
	// A held tail followed by a chunk much longer than a sentinel.
	d := dispatchLine(tok)
	big := bytes.Repeat([]byte("y_"), 10000)
	stream := d + "x__OMA_TER" + string(big) + terminalLine(tok, "exit:5")
	r := runFilter(t, tok, [][]byte{[]byte(d + "x__OMA_TER"), []byte(string(big) + terminalLine(tok, "exit:5"))})
	ref := runFilter(t, tok, whole(stream))
	assert.Equal(t, ref, r)
	assert.Equal(t, "x__OMA_TER"+string(big), string(r.out))
	assert.Equal(t, Terminal{Code: 5}, r.term)
}

func TestVerdict(t *testing.T) {
	d := dispatchLine(tok)
	cases := []struct {
		name   string
		stream string
		exit   int
		want   error
	}{
		{"ok", d + "out\n" + terminalLine(tok, "exit:0"), 0, nil},
		{"exit 7", d + terminalLine(tok, "exit:7"), 7, nil},
		{"timeout", d + terminalLine(tok, "timeout:137"), 137, nil},
		{"no dispatch", "boom\n", 1, ErrNoDispatch},
		{"no completion", d + "out\n", 0, ErrNoCompletion},
		{"no completion after malformed terminal", d + terminalLine(tok, "exit:x"), 0, ErrNoCompletion},
		{"disagreement", d + terminalLine(tok, "exit:0"), 3, ErrExitMismatch},
		{"timeout record, clean exit", d + terminalLine(tok, "timeout:137"), 0, ErrExitMismatch},
		{"exit 137 is not a timeout", d + terminalLine(tok, "exit:137"), 137, nil},
		{"forged exit 0 then exit 3", d + terminalLine(tok, "exit:0") + terminalLine(tok, "exit:3"), 3, ErrExitMismatch},
		{"forged line agreeing with the status", d + terminalLine(tok, "exit:3") + terminalLine(tok, "exit:3"), 3, ErrExitMismatch},
		{"forged timeout with exit 137", d + terminalLine(tok, "timeout:137") + terminalLine(tok, "exit:137"), 137, ErrExitMismatch},
		{"msb killed", d + "x", -1, ErrNoCompletion},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := NewFilter(tok, func([]byte) {})
			_, _ = f.Write([]byte(c.stream))
			require.NoError(t, f.Close())
			err := f.Verdict(c.exit)
			if c.want == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, c.want)
		})
	}
	f := NewFilter(tok, func([]byte) {})
	_, _ = f.Write([]byte(d + terminalLine(tok, "exit:0")))
	assert.EqualError(t, f.Verdict(3), "bash exit disagreed with command completion: terminal record exit:0, process exited with 3")
	assert.EqualError(t, NewFilter(tok, func([]byte) {}).Verdict(0), "bash failed before command dispatch")
}

// referenceFilter is the filter's specification applied to a whole stream:
// remove the first dispatch line, then every well-formed terminal line after
// it, leftmost first.
func referenceFilter(stream []byte, token string) filterResult {
	d := []byte(dispatchLine(token))
	i := bytes.Index(stream, d)
	if i < 0 {
		return filterResult{out: stream}
	}
	r := filterResult{dispatched: true, out: append([]byte{}, stream[:i]...)}
	rest := stream[i+len(d):]
	re := regexp.MustCompile(regexp.QuoteMeta(terminalPrefix+token+":") +
		`(?:exit:(0|[1-9][0-9]?|1[0-9][0-9]|2[0-4][0-9]|25[0-5])|timeout:137)\n`)
	prev := 0
	for _, m := range re.FindAllSubmatchIndex(rest, -1) {
		r.out = append(r.out, rest[prev:m[0]]...)
		prev = m[1]
		if r.terminals == 0 {
			if m[2] < 0 {
				r.term = Terminal{Timeout: true, Code: 137}
			} else {
				code := 0
				for _, c := range rest[m[2]:m[3]] {
					code = code*10 + int(c-'0')
				}
				r.term = Terminal{Code: code}
			}
		}
		r.terminals++
	}
	r.out = append(r.out, rest[prev:]...)
	r.termOK = r.terminals > 0
	return r
}

func normalize(r filterResult) filterResult {
	if len(r.out) == 0 {
		r.out = nil
	}
	return r
}

func FuzzFilter(f *testing.F) {
	const token = "t0k"
	d := dispatchLine(token)
	f.Add([]byte(d+"hello\n"+terminalLine(token, "exit:7")), uint64(1))
	f.Add([]byte("pre"+d+"x"+terminalLine(token, "timeout:137")+"post"), uint64(2))
	f.Add([]byte(d+terminalLine(token, "exit:0")+terminalLine(token, "exit:3")), uint64(3))
	f.Add([]byte(d+terminalPrefix+token+":exit:"+terminalLine(token, "exit:25")), uint64(4))
	f.Add([]byte(d+terminalLine(token, "exit:256")+terminalLine(token, "exit:05")), uint64(5))
	f.Add([]byte("__OMA_DISPATCHED__:t0__OMA_DISPATCHED__:t0k\n__OMA_TERMINAL__:t0k:timeout:13"), uint64(6))
	f.Add([]byte(d+d+"___"+terminalLine("x", "exit:1")), uint64(7))
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64) {
		if len(stream) > 2048 {
			return
		}
		want := normalize(referenceFilter(stream, token))
		check := func(how string, chunks [][]byte) {
			if got := normalize(runFilter(t, token, chunks)); !equalResults(got, want) {
				t.Fatalf("%s: got %+v, want %+v", how, got, want)
			}
		}
		check("whole", [][]byte{stream})
		check("bytewise", bytewise(string(stream)))
		for i := 0; i <= len(stream); i++ {
			check("split", [][]byte{stream[:i], stream[i:]})
		}
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		for range 8 {
			var chunks [][]byte
			for rest := stream; len(rest) > 0; {
				n := min(len(rest), rng.IntN(40))
				chunks = append(chunks, rest[:n])
				rest = rest[n:]
			}
			check("random", chunks)
		}
	})
}

func equalResults(a, b filterResult) bool {
	return bytes.Equal(a.out, b.out) && a.dispatched == b.dispatched && a.term == b.term &&
		a.termOK == b.termOK && a.terminals == b.terminals
}
