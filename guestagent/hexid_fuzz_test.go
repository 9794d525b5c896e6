//go:build linux

package guestagent

import (
	"regexp"
	"testing"
)

// FuzzIsHexID holds isHexID to the pattern it replaced.
func FuzzIsHexID(f *testing.F) {
	want := regexp.MustCompile(`\A[0-9a-f]+\z`)
	for _, s := range []string{"", "0", "abcdef0123456789", "ABC", "12g", "1 2", "a\n", "\xff", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got := isHexID(s); got != want.MatchString(s) {
			t.Fatalf("isHexID(%q) = %v", s, got)
		}
	})
}
