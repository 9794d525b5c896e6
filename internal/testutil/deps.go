package testutil

import (
	"os/exec"
	"strings"
	"testing"
)

// Linked returns the packages the package in the test's directory links
// that are one of roots or lie beneath one (an import path prefix ending
// at a path element).
func Linked(t testing.TB, roots ...string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var found []string
	for _, pkg := range strings.Fields(string(out)) {
		for _, root := range roots {
			if pkg == root || strings.HasPrefix(pkg, root+"/") {
				found = append(found, pkg)
				break
			}
		}
	}
	return found
}
