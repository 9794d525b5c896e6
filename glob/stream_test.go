package glob

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestReadinessFilter(t *testing.T) {
	cases := []struct {
		name   string
		chunks []string
		rest   string
		err    string // from Push, or from Finish when pushing succeeded
	}{
		{"marker alone", []string{"__OMA_GLOB_READY__\x00"}, "", ""},
		{"marker and paths", []string{"__OMA_GLOB_READY__\x00./a\x00"}, "./a\x00", ""},
		{"split marker", []string{"__OMA_GLO", "B_READY__", "\x00./", "a\x00"}, "./a\x00", ""},
		{"nothing", nil, "", "Glob process did not publish readiness"},
		{"marker without NUL", []string{"__OMA_GLOB_READY__"}, "", "Glob process did not publish readiness"},
		{"wrong marker", []string{"__OMA_GREP_READY__\x00"}, "", "Invalid glob readiness marker"},
		{"marker with prefix", []string{"x__OMA_GLOB_READY__\x00"}, "", "Invalid glob readiness marker"},
		{"empty marker", []string{"\x00./a\x00"}, "", "Invalid glob readiness marker"},
		{"256 bytes", []string{strings.Repeat("x", 256) + "\x00"}, "", "Invalid glob readiness marker"},
		{"257 bytes", []string{strings.Repeat("x", 257)}, "", "Glob readiness marker exceeds limit"},
		{"257 bytes then NUL", []string{strings.Repeat("x", 200), strings.Repeat("x", 57) + "\x00"}, "", "Glob readiness marker exceeds limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := NewReadinessFilter(EnumerationProtocol)
			var rest []byte
			var err error
			for _, ch := range c.chunks {
				var out []byte
				if out, err = f.Push([]byte(ch)); err != nil {
					break
				}
				rest = append(rest, out...)
			}
			if err == nil {
				err = f.Finish()
			}
			if c.err == "" {
				if err != nil || string(rest) != c.rest || !f.Ready() {
					t.Fatalf("rest %q, err %v, ready %v; want %q", rest, err, f.Ready(), c.rest)
				}
				return
			}
			if err == nil || err.Error() != c.err || !errors.Is(err, ErrNotReady) || f.Ready() {
				t.Fatalf("err %v, ready %v; want %q", err, f.Ready(), c.err)
			}
			if _, again := f.Push([]byte("__OMA_GLOB_READY__\x00")); again != err {
				t.Fatalf("after failure Push returned %v", again)
			}
		})
	}
}

func TestGrepProtocolTexts(t *testing.T) {
	p := Protocol{Tool: "grep", Marker: "__OMA_GREP_READY__", Stream: "output"}
	f := NewReadinessFilter(p)
	if err := f.Finish(); err == nil || err.Error() != "Grep process did not publish readiness" {
		t.Fatalf("Finish: %v", err)
	}
	if _, err := NewReadinessFilter(p).Push([]byte("nope\x00")); err == nil || err.Error() != "Invalid grep readiness marker" {
		t.Fatalf("Push: %v", err)
	}
	c, err := NewCollector(p, CollectorOptions{Root: "/w", Rooted: true, MaxRawBytes: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push([]byte("/w/abc\x00")); err == nil || err.Error() != "Grep output exceeds 4 raw bytes" {
		t.Fatalf("raw: %v", err)
	}
}

func collect(t *testing.T, opts CollectorOptions, stream string) ([]string, bool, error) {
	t.Helper()
	c, err := NewCollector(EnumerationProtocol, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push([]byte(stream)); err != nil {
		return c.Matches(), c.LimitReached(), err
	}
	return c.Matches(), c.LimitReached(), c.Finish()
}

func TestCollector(t *testing.T) {
	md, err := Compile("*.md")
	if err != nil {
		t.Fatal(err)
	}
	many := strings.Repeat("./f.md\x00", 150)
	long := strings.Repeat("n", 1000)
	cases := []struct {
		name   string
		opts   CollectorOptions
		stream string
		want   []string
		limit  bool
		err    string
	}{
		{"absolute", CollectorOptions{Root: "/workspace/d"}, "./a\x00./b/c\x00", []string{"/workspace/d/a", "/workspace/d/b/c"}, false, ""},
		{"filtered", CollectorOptions{Root: "/w", Match: md.Match}, "./a.md\x00./b.txt\x00./x/.c.md\x00", []string{"/w/a.md", "/w/x/.c.md"}, false, ""},
		{"relative to base", CollectorOptions{Root: "/w/d", Base: "/w"}, "./a\x00", []string{"d/a"}, false, ""},
		{"relative to a sibling", CollectorOptions{Root: "/mnt/up", Base: "/w/x"}, "./a\x00", []string{"../../mnt/up/a"}, false, ""},
		{"base is root", CollectorOptions{Root: "/w/", Base: "/w"}, "./a\x00", []string{"a"}, false, ""},
		{"root is /", CollectorOptions{Root: "/"}, "./etc/x\x00", []string{"/etc/x"}, false, ""},
		{"empty stream", CollectorOptions{Root: "/w"}, "", nil, false, ""},
		{"silent cap", CollectorOptions{Root: "/w", Match: md.Match}, many, slices.Repeat([]string{"/w/f.md"}, 100), true, ""},
		{"cap ignores what follows", CollectorOptions{Root: "/w", MaxMatches: 2}, "./a\x00./b\x00./c\x00./../escape\x00./partial", []string{"/w/a", "/w/b"}, true, ""},
		{"raw limit", CollectorOptions{Root: "/w", MaxRawBytes: 8}, "./a\x00./bcd\x00", []string{"/w/a"}, false, "Glob enumeration exceeds 8 raw bytes"},
		{"raw limit exact", CollectorOptions{Root: "/w", MaxRawBytes: 8}, "./a\x00./b\x00", []string{"/w/a", "/w/b"}, false, ""},
		{"raw limit default", CollectorOptions{Root: "/w"}, "./" + strings.Repeat("a", 1<<20), nil, false, "Glob enumeration exceeds 1048576 raw bytes"},
		{"output limit", CollectorOptions{Root: "/w", MaxOutputBytes: 8}, "./a\x00./b\x00", []string{"/w/a"}, false, "Glob output exceeds 8 bytes"},
		{"output limit exact", CollectorOptions{Root: "/w", MaxOutputBytes: 9}, "./a\x00./b\x00", []string{"/w/a", "/w/b"}, false, ""},
		{"output limit default", CollectorOptions{Root: "/w"}, strings.Repeat("./"+long+"\x00", 66), slices.Repeat([]string{"/w/" + long}, 65), false, "Glob output exceeds 65536 bytes"},
		{"unterminated", CollectorOptions{Root: "/w"}, "./a\x00./b", []string{"/w/a"}, false, "Glob enumeration ended inside a path"},
		{"dotdot", CollectorOptions{Root: "/w"}, "./a/../../etc\x00", nil, false, `Glob enumeration returned an invalid path "./a/../../etc"`},
		{"dot", CollectorOptions{Root: "/w"}, "./a/./b\x00", nil, false, `Glob enumeration returned an invalid path "./a/./b"`},
		{"empty", CollectorOptions{Root: "/w"}, "\x00", nil, false, `Glob enumeration returned an invalid path ""`},
		{"no ./", CollectorOptions{Root: "/w"}, "/etc/passwd\x00", nil, false, `Glob enumeration returned an invalid path "/etc/passwd"`},
		{"double slash", CollectorOptions{Root: "/w"}, ".//x\x00", nil, false, `Glob enumeration returned an invalid path ".//x"`},
		{"trailing slash", CollectorOptions{Root: "/w"}, "./x/\x00", nil, false, `Glob enumeration returned an invalid path "./x/"`},
		{"rooted", CollectorOptions{Root: "/w/s", Rooted: true}, "/w/s/a\x00/w/s/.h/b\x00", []string{"/w/s/a", "/w/s/.h/b"}, false, ""},
		{"rooted file", CollectorOptions{Root: "/w/f.txt", Rooted: true, Match: md.Match}, "/w/f.txt\x00", []string{"/w/f.txt"}, false, ""},
		{"rooted outside", CollectorOptions{Root: "/w/s", Rooted: true}, "/w/sx/a\x00", nil, false, `Glob enumeration returned an invalid path "/w/sx/a"`},
		{"rooted escape", CollectorOptions{Root: "/w/s", Rooted: true}, "/w/s/../t\x00", nil, false, `Glob enumeration returned an invalid path "/w/s/../t"`},
		{"rooted relative", CollectorOptions{Root: "/w/s", Rooted: true}, "./a\x00", nil, false, `Glob enumeration returned an invalid path "./a"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, limit, err := collect(t, c.opts, c.stream)
			if c.err == "" && err != nil || c.err != "" && (err == nil || err.Error() != c.err) {
				t.Fatalf("err %v, want %q", err, c.err)
			}
			if !slices.Equal(got, c.want) || limit != c.limit {
				t.Fatalf("%d matches %.200q limit %v, want %d %.200q %v", len(got), got, limit, len(c.want), c.want, c.limit)
			}
		})
	}
}

func TestCollectorErrorKinds(t *testing.T) {
	_, _, err := collect(t, CollectorOptions{Root: "/w", MaxRawBytes: 1}, "./a\x00")
	if !errors.Is(err, ErrLimit) {
		t.Errorf("raw limit: %v", err)
	}
	_, _, err = collect(t, CollectorOptions{Root: "/w", MaxOutputBytes: 1}, "./a\x00")
	if !errors.Is(err, ErrLimit) {
		t.Errorf("output limit: %v", err)
	}
	_, _, err = collect(t, CollectorOptions{Root: "/w"}, "./..\x00")
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("bad path: %v", err)
	}
	for _, opts := range []CollectorOptions{{Root: "w"}, {Root: ""}, {Root: "/w", Base: "x"}} {
		if _, err := NewCollector(EnumerationProtocol, opts); err == nil {
			t.Errorf("NewCollector(%+v) accepted", opts)
		}
	}
}

type outcome struct {
	ready   bool
	matches []string
	limit   bool
	err     string
}

// feed runs a stream through a readiness filter and a collector, split into
// the given chunks, the way a caller wires them.
func feed(chunks [][]byte, opts CollectorOptions) outcome {
	f := NewReadinessFilter(EnumerationProtocol)
	c, err := NewCollector(EnumerationProtocol, opts)
	if err != nil {
		panic(err)
	}
	fail := func(err error) outcome {
		return outcome{f.Ready(), c.Matches(), c.LimitReached(), err.Error()}
	}
	for _, ch := range chunks {
		rest, err := f.Push(ch)
		if err != nil {
			return fail(err)
		}
		if err := c.Push(rest); err != nil {
			return fail(err)
		}
	}
	if err := f.Finish(); err != nil {
		return fail(err)
	}
	if err := c.Finish(); err != nil {
		return fail(err)
	}
	return outcome{f.Ready(), c.Matches(), c.LimitReached(), ""}
}

func splitAt(data []byte, cuts []int) [][]byte {
	var out [][]byte
	last := 0
	for _, c := range cuts {
		out = append(out, data[last:c])
		last = c
	}
	return append(out, data[last:])
}

func FuzzStreamChunking(f *testing.F) {
	f.Add([]byte("__OMA_GLOB_READY__\x00./a.md\x00./b\x00./c/d.md\x00"), uint64(1), uint8(3), uint8(20))
	f.Add([]byte("__OMA_GLOB_READY__\x00./a.md\x00./x/../y\x00"), uint64(2), uint8(2), uint8(5))
	f.Add([]byte("__OMA_GLOB_READY__\x00./aaaa.md\x00./b.md\x00./c.md"), uint64(3), uint8(1), uint8(12))
	f.Add([]byte("__OMA_GLOB_READY\x00./a\x00"), uint64(4), uint8(9), uint8(30))
	f.Add([]byte(strings.Repeat("z", 300)), uint64(5), uint8(4), uint8(40))
	f.Add([]byte("__OMA_GLOB_READY__\x00./q.md\x00./r.md\x00./s.md\x00./t.md\x00"), uint64(6), uint8(2), uint8(16))
	md, err := Compile("*.md")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, stream []byte, seed uint64, maxMatches, maxBytes uint8) {
		opts := CollectorOptions{
			Root:           "/w",
			Match:          md.Match,
			MaxMatches:     int(maxMatches%5) + 1,
			MaxRawBytes:    int(maxBytes) + 1,
			MaxOutputBytes: int(maxBytes) + 1,
		}
		whole := feed([][]byte{stream}, opts)
		rng := rand.New(rand.NewPCG(seed, 0))
		for range 4 {
			var cuts []int
			for i := 1; i < len(stream); i++ {
				if rng.IntN(4) == 0 {
					cuts = append(cuts, i)
				}
			}
			got := feed(splitAt(stream, cuts), opts)
			if got.ready != whole.ready || got.limit != whole.limit || got.err != whole.err || !slices.Equal(got.matches, whole.matches) {
				t.Fatalf("cuts %v: %+v, whole stream: %+v", cuts, got, whole)
			}
		}
		for _, m := range whole.matches {
			if unq, err := strconv.Unquote(m); err == nil && strings.HasPrefix(m, `"`) {
				m = unq // a name with control bytes is shown quoted
			}
			if !strings.HasPrefix(m, "/w/") || strings.Contains(m, "/../") || strings.HasSuffix(m, "/..") {
				t.Fatalf("escaping result %q", m)
			}
		}
	})
}

// Collecting a large enumeration allocates nothing per path that does not
// match (BenchmarkSearch: 100,000 paths in a glob call).
func TestCollectorAllocatesPerMatchOnly(t *testing.T) {
	p, err := Compile("42/17/*")
	if err != nil {
		t.Fatal(err)
	}
	var stream []byte
	for i := range 10_000 {
		stream = fmt.Appendf(stream, "./%02d/%02d/%d\x00", i/1000, i/10%100, i%10)
	}
	allocs := testing.AllocsPerRun(3, func() {
		c, err := NewCollector(EnumerationProtocol, CollectorOptions{Root: "/w", Match: p.Match})
		if err != nil {
			t.Fatal(err)
		}
		for chunk := range slices.Chunk(stream, 4096) {
			if err := c.Push(chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Finish(); err != nil || len(c.Matches()) != 0 {
			t.Fatalf("%v, %q", err, c.Matches())
		}
	})
	if allocs > 100 {
		t.Errorf("%.0f allocations for 10,000 paths", allocs)
	}
}
