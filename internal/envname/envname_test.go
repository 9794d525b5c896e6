package envname

import "testing"

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{
		"TOKEN": true, "_x1": true, "a_B_9": true,
		"": false, "1A": false, "A-B": false, "A=B": false, "A B": false, "Ä": false, "A.B": false,
	} {
		if got := Valid(s); got != want {
			t.Errorf("Valid(%q) = %v, want %v", s, got, want)
		}
	}
}
