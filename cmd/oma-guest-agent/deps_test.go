package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The agent starts once per call on msb's one exec per call and in a
// sandbox per call: it links no regular expression package, whose code
// made it 250 KB larger and slower to start (see guestagent.isHexID).
func TestLinksNoRegexp(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "regexp" || strings.HasPrefix(pkg, "regexp/") {
			t.Errorf("the agent links %s", pkg)
		}
	}
}
