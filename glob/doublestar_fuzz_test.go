package glob

import (
	"errors"
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"
)

// The glob automaton is checked against github.com/bmatcuk/doublestar/v4, a
// matcher nobody here wrote, on the dialect the two share. The patterns are
// built from tokens both read alike; where the tool's dialect deliberately
// differs, the generator leaves the construct out:
//
//   - A pattern matches at any depth (an implicit leading **/), so the
//     oracle is doublestar.Match("**/" + pattern).
//   - ** is a globstar wherever it stands ("a**b" crosses directories);
//     doublestar treats it so only as a whole path segment. The generator
//     emits ** only as "**/" at the start of a segment, and never puts one
//     star right after another (not through braces either).
//   - A trailing "/**" needs something below the directory ("a/**" does
//     not match "a"); doublestar matches the directory itself too. Not
//     generated.
//   - Braces need two or more non-empty alternatives, nested at most four
//     deep; doublestar accepts {} and {a}. Compile refuses those, so they
//     are never compared.
//   - Compile refuses patterns over its size limits (MaxAlternatives,
//     MaxStates, MaxPatternBytes); those are skipped.
//   - A class never matches '/'; doublestar's negated class does ("[!a]"
//     matches "/"). Negated classes here name '/' among their exclusions,
//     which changes nothing for the tool.
//   - An invalid UTF-8 byte is a character of its own; doublestar reads a
//     pattern as runes. Patterns and paths here are ASCII.
var sharedTokens = []string{
	"a", "b", "c", ".", "-", ",", "/", "*", "?", "**/",
	"[ab]", "[!a/]", "[^b./]", "[a-c]", `\*`, `\?`, `\[`,
	"{a,b}", "{a,b/c}", "{*.c,a?}", "{a,{b,c}}", "{[ab],.}",
}

// sharedPattern turns fuzz bytes into a pattern of the shared dialect, or
// "" when they make none (an empty pattern, a leading or doubled '/', or a
// "**/" that does not start a segment).
func sharedPattern(data []byte) string {
	var b strings.Builder
	for _, c := range data {
		tok := sharedTokens[int(c)%len(sharedTokens)]
		s := b.String()
		if strings.HasPrefix(tok, "/") && (s == "" || strings.HasSuffix(s, "/")) {
			continue
		}
		if tok == "**/" && s != "" && !strings.HasSuffix(s, "/") {
			continue
		}
		if strings.HasSuffix(s, "*") && (strings.HasPrefix(tok, "*") || strings.HasPrefix(tok, "{*")) {
			continue // two stars in a row make a globstar here, a star there
		}
		b.WriteString(tok)
	}
	p := strings.TrimSuffix(b.String(), "/")
	if p == "" || strings.HasSuffix(p, "**") {
		return "" // a trailing "/**", which the dialects read differently
	}
	return p
}

// sharedPath turns fuzz bytes into a clean relative path over a small
// alphabet, so patterns and paths meet often.
func sharedPath(data []byte) string {
	const alphabet = "abc.-,*?[/"
	var b strings.Builder
	for _, c := range data {
		b.WriteByte(alphabet[int(c)%len(alphabet)])
	}
	var parts []string
	for _, part := range strings.Split(b.String(), "/") {
		if part != "" {
			parts = append(parts, part)
		}
	}
	return strings.Join(parts, "/")
}

// isLimit reports whether Compile refused a pattern for its size alone.
func isLimit(err error) bool {
	return strings.Contains(err.Error(), "more than") || strings.Contains(err.Error(), "exceeds")
}

func FuzzDoublestar(f *testing.F) {
	for _, seed := range [][2]string{
		{"\x00", "\x00"}, {"\x07\x06\x00", "\x00\x09\x00"}, {"\x09\x00\x06\x07", "\x01\x09\x00"},
		{"\x13\x05\x00", "\x00\x09\x01"}, {"\x0e\x12", "\x02"}, {"\x15\x09", "\x03\x09\x00"},
	} {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	f.Fuzz(func(t *testing.T, patternData, pathData []byte) {
		pattern, path := sharedPattern(patternData), sharedPath(pathData)
		if pattern == "" || path == "" {
			return
		}
		p, err := Compile(pattern)
		if errors.Is(err, ErrInvalidPattern) && isLimit(err) {
			return // the tool's size limits; doublestar has none
		}
		if err != nil {
			t.Fatalf("Compile(%q) refused a pattern of the shared dialect: %v", pattern, err)
		}
		want, err := doublestar.Match("**/"+pattern, path)
		if err != nil {
			t.Fatalf("doublestar refused %q: %v", "**/"+pattern, err)
		}
		if got := p.Match(path); got != want {
			t.Fatalf("Match(%q, %q) = %v, doublestar says %v", pattern, path, got, want)
		}
	})
}
