package main

import (
	"testing"

	"github.com/oma-sandbox/oma-sandbox/outputs"
)

// An --allow value written as a network destination is refused; an output
// path is not, and none that --allow has an effect on (it holds a denied
// segment such as .git) can look like one.
func TestNetTarget(t *testing.T) {
	for _, v := range []string{
		"127.0.0.1:8080", "127.0.0.1", "10.0.0.0/8", "::1", "fd00::/8", "[fd00::1]:53", "[::1]",
		"*.example.com", "api.example.com:443", "localhost:8080", "db:5432", "http://localhost:8080",
	} {
		if !netTarget(v) {
			t.Errorf("netTarget(%q) = false, want true", v)
		}
	}
	paths := []string{"report.txt", "example.com", "index.html", "v1.2.3", "build/out.bin", "notes:draft",
		"10.0.0.0/.git", "a:b/c", "*.log", "site/.vscode/tasks.json", "1.2.3.4.txt"}
	for _, d := range outputs.DeniedNames() {
		paths = append(paths, d, "repo/"+d, d+"/config", "127.0.0.1/"+d, d+":8080")
	}
	for _, v := range paths {
		if netTarget(v) {
			t.Errorf("netTarget(%q) = true, want false", v)
		}
	}
}
