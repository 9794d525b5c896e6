package bashproto

import (
	"strings"
	"testing"
)

// The ids and secrets NewCall makes have the form IsID checks, and
// nothing else of that length does.
func TestNewCallMakesIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		c := NewCall()
		for _, s := range []string{c.ID, c.Secret} {
			if !IsID(s) || seen[s] {
				t.Fatalf("%q is not a fresh id", s)
			}
			seen[s] = true
		}
	}
	for _, s := range []string{"", strings.Repeat("a", IDLen-1), strings.Repeat("a", IDLen+1), strings.Repeat("A", IDLen), strings.Repeat("g", IDLen), strings.Repeat("-", IDLen)} {
		if IsID(s) {
			t.Errorf("IsID(%q)", s)
		}
	}
}
