package glob

import (
	"errors"
	"strings"
	"testing"
)

func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"*.md", "sub/*.md", "**/a/**/b", "{a,{b,{c,{d,e}}}}", "[!a-z\\]]x", "a\\", "[]", "{a}",
		"{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}", "a*a*a*a*a*a*b", "[z-a]", "\xff[\xfe-\xff]", "{**,x}/y",
	} {
		f.Add(s, "a/b/c.md")
	}
	f.Fuzz(func(t *testing.T, pattern, path string) {
		p, err := Compile(pattern)
		if err != nil {
			var pe *PatternError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidPattern) || !strings.HasPrefix(err.Error(), "Invalid glob pattern: ") {
				t.Fatalf("Compile(%q): untyped error %v", pattern, err)
			}
			return
		}
		if p.States() > MaxStates || p.States() == 0 {
			t.Fatalf("Compile(%q): %d states", pattern, p.States())
		}
		for _, in := range []string{path, pattern, "x/" + path} {
			_, steps := p.match(in)
			if bound := (len(in) + 1) * p.States(); steps > bound {
				t.Fatalf("%q on %q: %d visits, bound %d", pattern, in, steps, bound)
			}
		}
	})
}

// A pattern without metacharacters matches exactly the path itself at any
// depth: the path equals it or ends in "/" followed by it.
func FuzzLiteral(f *testing.F) {
	f.Add("a.md", "x/a.md")
	f.Add("sub/a.md", "x/sub/a.md")
	f.Add("a.md", "xa.md")
	f.Add(".env", ".env")
	f.Add("é/ü", "ö/é/ü")
	f.Add("a,b", "a,b")
	f.Add("\xff", "d/\xff")
	f.Fuzz(func(t *testing.T, pattern, path string) {
		pattern = strings.Map(func(r rune) rune {
			if strings.ContainsRune(`*?[]{}\`, r) {
				return -1
			}
			return r
		}, pattern)
		if pattern == "" || len(pattern) > MaxPatternBytes {
			return
		}
		p, err := Compile(pattern)
		if err != nil {
			t.Fatalf("Compile(%q): %v", pattern, err)
		}
		for _, in := range []string{path, pattern, "d/" + pattern, "d" + pattern, path + "/" + pattern, pattern + "/" + path} {
			want := in == pattern || strings.HasSuffix(in, "/"+pattern)
			if got := p.Match(in); got != want {
				t.Fatalf("Compile(%q).Match(%q) = %v, want %v", pattern, in, got, want)
			}
		}
	})
}
