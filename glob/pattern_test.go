package glob

import (
	"errors"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		pattern string
		yes, no []string
	}{
		{"*.md", []string{"c.md", "a/b/c.md", ".md", "x/.md"}, []string{"c.mdx", "c.md/x", "cmd"}},
		{"sub/*.md", []string{"sub/a.md", "x/sub/a.md", "x/y/sub/.a.md"}, []string{"x/sub/d/a.md", "xsub/a.md", "sub/a.mdx"}},
		{"**/*.md", []string{"a.md", "x/y/a.md"}, []string{"a.txt"}},
		{"a/**/b", []string{"a/b", "a/x/b", "a/x/y/b", "q/a/b"}, []string{"a/xb", "ab", "a/b/c"}},
		{"a/**", []string{"a/b", "a/b/c", "x/a/b"}, []string{"a", "ab/c"}},
		{"a**", []string{"a", "abc", "a/b/c", "x/ab"}, []string{"b", "ba"}},
		{"**", []string{"a", "a/b", ".x"}, nil},
		{"*", []string{"a", "a/b", ".hidden"}, nil},
		{".*", []string{".env", "d/.git", "."}, []string{"env", "a.b"}},
		{"?.go", []string{"a.go", "d/é.go", "d/日.go"}, []string{"ab.go", ".go", "a/.go/x"}},
		{"a?b", []string{"axb"}, []string{"a/b", "ab"}},
		{"[abc].txt", []string{"a.txt", "d/c.txt"}, []string{"d.txt", "ab.txt"}},
		{"[a-c]x", []string{"bx", "q/cx"}, []string{"dx", "-x"}},
		{"[!a-c]x", []string{"dx", "éx"}, []string{"ax", "cx"}},
		{"[^a-c]x", []string{"dx"}, []string{"bx"}},
		{"a[!b]c", []string{"axc"}, []string{"a/c", "abc"}},
		{"a[/]c", nil, []string{"a/c"}},
		{"[-a]", []string{"-", "a"}, []string{"b"}},
		{"[a-]", []string{"-", "a"}, []string{"b"}},
		{`[a\-c]`, []string{"a", "-", "c"}, []string{"b"}},
		{`[\]]`, []string{"]"}, []string{`\`}},
		{`[\!a]`, []string{"!", "a"}, []string{"b"}},
		{"[é-ë]", []string{"é", "ê", "ë"}, []string{"e", "è", "ì"}},
		{"{a,b}.go", []string{"a.go", "x/b.go"}, []string{"c.go", "{a,b}.go"}},
		{"{a,{b,{c,d}}}.go", []string{"a.go", "b.go", "c.go", "d.go"}, []string{"e.go"}},
		{"x.{md,txt}", []string{"x.md", "x.txt"}, []string{"x.mdtxt"}},
		{"{src,lib}/**/*.go", []string{"src/a.go", "p/lib/x/y.go"}, []string{"doc/a.go"}},
		{"{**,x}/a", []string{"a", "q/r/a", "x/a"}, []string{"qa"}},
		{"{a*,b}*", []string{"a/b", "b", "bc"}, []string{"b/c", "c"}},
		{"a,b", []string{"a,b"}, []string{"a"}},
		{`\*.md`, []string{"*.md", "d/*.md"}, []string{"a.md"}},
		{`\?`, []string{"?"}, []string{"a"}},
		{`\[a\]`, []string{"[a]"}, []string{"a"}},
		{`\{a,b\}`, []string{"{a,b}"}, []string{"a"}},
		{`\\`, []string{`\`}, []string{"a"}},
		{`a\b`, []string{"ab"}, []string{`a\b`}},
		{`{a\,b,c}`, []string{"a,b", "c"}, []string{"a"}},
		{"weird\xff[!a]", []string{"weird\xffb", "weird\xff\xfe"}, []string{"weird\xffa", "weirdb"}},
		{"/a", []string{"x//a"}, []string{"a", "/a/b"}},
	}
	for _, c := range cases {
		p, err := Compile(c.pattern)
		if err != nil {
			t.Fatalf("Compile(%q): %v", c.pattern, err)
		}
		for _, s := range c.yes {
			if !p.Match(s) {
				t.Errorf("%q should match %q", c.pattern, s)
			}
		}
		for _, s := range c.no {
			if p.Match(s) {
				t.Errorf("%q should not match %q", c.pattern, s)
			}
		}
	}
}

func TestCompileErrors(t *testing.T) {
	deep := "{a,{b,{c,{d,{e,f}}}}}"
	cases := []struct{ pattern, msg string }{
		{"", "pattern is empty"},
		{strings.Repeat("a", MaxPatternBytes+1), "pattern exceeds 1024 bytes"},
		{"a[bc", "unmatched '[' (missing ']')"},
		{"a]", "unmatched ']'"},
		{"{a,b", "unmatched '{' (missing '}')"},
		{"a}", "unmatched '}'"},
		{"{a,b}}", "unmatched '}'"},
		{"[]", `empty character class "[]"`},
		{"[!]", `empty character class "[!]"`},
		{"[z-a]", `descending range in character class "[z-a]"`},
		{`a\`, "trailing escape"},
		{`[a\`, "trailing escape"},
		{"{a}", "braces need at least two alternatives"},
		{"{a,}", "empty alternative in braces"},
		{"{,a}", "empty alternative in braces"},
		{deep, "braces nested deeper than 4"},
		{"{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}", "pattern expands to more than 64 alternatives"},
		{"[" + strings.Repeat("a", MaxClassBytes+1) + "]", "character class exceeds 256 bytes"},
		{"{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}" + strings.Repeat("x", 100), "pattern compiles to more than 4096 states"},
	}
	for _, c := range cases {
		p, err := Compile(c.pattern)
		if err == nil {
			t.Errorf("Compile(%.40q) = %v, want error", c.pattern, p)
			continue
		}
		if want := "Invalid glob pattern: " + c.msg; err.Error() != want {
			t.Errorf("Compile(%.40q) error %q, want %q", c.pattern, err, want)
		}
		var pe *PatternError
		if !errors.Is(err, ErrInvalidPattern) || !errors.As(err, &pe) || pe.Pattern != c.pattern {
			t.Errorf("Compile(%.40q) error %#v is not a PatternError for ErrInvalidPattern", c.pattern, err)
		}
	}
}

func TestLimitsAreInclusive(t *testing.T) {
	ok := []string{
		strings.Repeat("a", MaxPatternBytes),
		"{a,{b,{c,{d,e}}}}",
		"{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}",
		"[" + strings.Repeat("a", MaxClassBytes) + "]",
	}
	for _, s := range ok {
		if _, err := Compile(s); err != nil {
			t.Errorf("Compile(%.40q): %v", s, err)
		}
	}
	// 64 alternatives of 61 tokens each, plus the implicit prefix (two
	// states) and the accepting state: exactly 4096 states.
	p, err := Compile("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}" + strings.Repeat("x", 55))
	if err != nil {
		t.Fatal(err)
	}
	if p.States() != MaxStates {
		t.Errorf("States() = %d, want %d", p.States(), MaxStates)
	}
}

// Matching is a state-set simulation: each input character costs at most one
// visit per state, whatever the pattern, so nothing can backtrack.
func TestNoBacktracking(t *testing.T) {
	pattern := strings.Repeat("a*", 100) + "b"
	input := strings.Repeat("a", 20_000)
	p, err := Compile(pattern)
	if err != nil {
		t.Fatal(err)
	}
	ok, steps := p.match(input)
	if ok {
		t.Fatal("matched without a b")
	}
	if bound := (len(input) + 1) * p.States(); steps > bound {
		t.Fatalf("%d state visits exceed the bound %d", steps, bound)
	}
	if ok, _ := p.match(input + "b"); !ok {
		t.Fatal("no match with the b")
	}

	p, err = Compile(strings.Repeat("**/", 100) + "x")
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat("d/", 10_000) + "y"
	if ok, steps := p.match(deep); ok || steps > (len(deep)+1)*p.States() {
		t.Fatalf("match = %v after %d visits, bound %d", ok, steps, (len(deep)+1)*p.States())
	}
}

func TestToRipgrep(t *testing.T) {
	for in, want := range map[string]string{
		"*.md":      "**/*.md",
		"sub/*.md":  "**/sub/*.md",
		"**/a":      "**/a",
		"**":        "**/**",
		"{a,b}/*.c": "**/{a,b}/*.c",
	} {
		if got := ToRipgrep(in); got != want {
			t.Errorf("ToRipgrep(%q) = %q, want %q", in, got, want)
		}
	}
}

// Match runs once per enumerated file (100,000 times for a large workspace),
// so it must not allocate in the steady state.
func TestMatchDoesNotAllocate(t *testing.T) {
	p, err := Compile("{src,lib}/**/*.{go,md}")
	if err != nil {
		t.Fatal(err)
	}
	p.Match("warm/up.go")
	if n := testing.AllocsPerRun(100, func() { p.Match("src/a/b/c/file.go") }); n > 0 {
		t.Errorf("Match allocates %.1f times per call", n)
	}
}

func TestNarrowing(t *testing.T) {
	for pattern, want := range map[string]Narrowing{
		"*.py":          {SkipGit: true, Name: "*.py"},
		"calc/**/*.py":  {SkipGit: true, Name: "*.py", Under: "calc"},
		"README.md":     {SkipGit: true, Name: "README.md"},
		"src/**":        {SkipGit: true, Under: "src"},
		"a/b/c*/d/*.go": {SkipGit: true, Name: "*.go", Under: "a/b"},
		"a//b/x":        {SkipGit: true, Name: "x", Under: "a"},
		"*.{go,md}":     {SkipGit: true},
		"a/?.txt":       {SkipGit: true, Under: "a"},
		"a/[ab].txt":    {SkipGit: true, Under: "a"},
		`a/\*.txt`:      {SkipGit: true},
		".git/**":       {Under: ".git"},
		"**/.gitignore": {Name: ".gitignore"},
		"docs/":         {SkipGit: true, Under: "docs"},
		"x/**/y*":       {SkipGit: true, Name: "y*", Under: "x"},
	} {
		p, err := Compile(pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Narrowing(); got != want {
			t.Errorf("%q: got %+v, want %+v", pattern, got, want)
		}
	}
}
