//go:build linux

package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// TestToolNoResume: `tool --no-resume` on a paused session fails (exit 1)
// with "session is paused", naming the tool once, and changes nothing: on
// the local backend a background process started before the pause still
// runs once resumed, and on either backend the session serves the next
// call.
func TestToolNoResume(t *testing.T) {
	for _, backend := range []string{"local", "msb"} {
		t.Run(backend, func(t *testing.T) {
			global := []string{"--state-dir", t.TempDir()}
			if backend == "msb" {
				global = append(global, "--msb", fakemsbtest.New(t).Bin)
			}
			run := func(want int, args ...string) (string, string) {
				t.Helper()
				var out, errs bytes.Buffer
				if code := Main(slices.Concat(global, args), nil, &out, &errs); code != want {
					t.Fatalf("%q exited %d, want %d; stderr:\n%s", args, code, want, errs.String())
				}
				return strings.TrimSpace(out.String()), errs.String()
			}
			name, _ := run(0, "session", "create", "--backend", backend)
			defer run(0, "session", "rm", name)
			if backend == "local" {
				run(0, "tool", name, "bash", jsonObject("command", "sleep 600 & echo $! > bg.pid"))
			}
			run(0, "session", "pause", name)
			for _, c := range []struct{ tool, input string }{
				{"glob", jsonObject("pattern", "*")},
				{"grep", jsonObject("pattern", "x", "path", "/workspace")},
				{"bash", jsonObject("command", "touch ran")},
				{"read", jsonObject("path", "bg.pid")},
			} {
				_, errs := run(1, "tool", "--no-resume", name, c.tool, c.input)
				if !strings.HasPrefix(errs, "oma-sandbox: "+c.tool+": ") || strings.Contains(errs, c.tool+": "+c.tool+":") ||
					!strings.Contains(errs, "session is paused") {
					t.Errorf("%s: stderr %q, want the tool named once and the session paused", c.tool, errs)
				}
			}
			run(0, "session", "resume", name)
			out, _ := run(0, "tool", name, "bash", jsonObject("command", "test ! -e ran && echo nothing-ran"))
			if out != "nothing-ran" {
				t.Errorf("after the refused calls: %q", out)
			}
			if backend == "local" {
				out, _ := run(0, "tool", name, "bash", jsonObject("command", `tr '\0' ' ' < "/proc/$(cat bg.pid)/cmdline"`))
				if !strings.HasPrefix(out, "sleep 600") {
					t.Errorf("the background process is gone after the refused calls: %q", out)
				}
			}
		})
	}
}
