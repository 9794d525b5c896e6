//go:build linux

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// TestAuditLog runs tool calls and every lifecycle action through the CLI
// with --log-format json on both backends, and reads the log back: one
// record per call and per action, with their attributes, and nowhere in
// it a planted file body, a planted secret (a --secret from the
// environment, which the command also prints in full) or the command's
// text.
func TestAuditLog(t *testing.T) {
	for _, backend := range []string{"local", "msb"} {
		t.Run(backend, func(t *testing.T) { testAuditLog(t, backend) })
	}
}

func testAuditLog(t *testing.T, backend string) {
	secret, body := "planted-secret-"+rand.Text(), "planted-body-"+rand.Text()
	encoded := base64.StdEncoding.EncodeToString([]byte(secret)) // the command's text holds this
	t.Setenv("OMA_AUDIT_SECRET", secret)
	global := []string{"--state-dir", t.TempDir(), "--log-format", "json", "--log-level", "info"}
	if backend == "msb" {
		global = append(global, "--msb", fakemsbtest.New(t).Bin)
	}
	var log bytes.Buffer
	run := func(want int, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if code := Main(slices.Concat(global, args), nil, &out, &log); code != want {
			t.Fatalf("%q exited %d, want %d; log:\n%s", args, code, want, log.String())
		}
		return strings.TrimSpace(out.String())
	}
	name := run(0, "session", "create", "--backend", backend, "--allow-net", "127.0.0.1:9", "--secret", "OMA_AUDIT_SECRET@127.0.0.1")
	calls := []struct {
		tool, input, result string
		exit                int
		shows               string // what the tool's output must carry, so the log's silence means something
	}{
		{"write", jsonObject("path", "audit.txt", "content", body), "ok", 0, ""},
		{"read", jsonObject("path", "audit.txt"), "ok", 0, body},
		{"bash", jsonObject("command", `echo "$OMA_AUDIT_SECRET"; echo `+encoded+` | base64 -d`), "ok", 0, secret},
		{"bash", jsonObject("command", "exit 3"), "tool_error", 1, ""},
		{"bash", `{"command":"sleep 30","timeout":1}`, "guest_timeout", 1, ""},
		{"read", jsonObject("path", "missing.txt"), "tool_error", 1, ""},
	}
	for _, c := range calls {
		if out := run(c.exit, "tool", name, c.tool, c.input); !strings.Contains(out, c.shows) {
			t.Fatalf("%s %s: output %q lacks %q", c.tool, c.input, out, c.shows)
		}
	}
	run(0, "session", "pause", name)
	run(0, "session", "resume", name)
	fork := run(0, "session", "fork", name)
	run(0, "session", "rm", name, fork)

	var toolCalls, actions []map[string]any
	for line := range strings.Lines(log.String()) {
		if strings.HasPrefix(line, "oma-sandbox: ") {
			continue // the command's own message, such as a failed tool's
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a log line is not JSON: %q", line)
		}
		switch r["msg"] {
		case "tool call":
			toolCalls = append(toolCalls, r)
		case "session lifecycle":
			actions = append(actions, r)
		}
	}
	if len(toolCalls) != len(calls) {
		t.Errorf("%d tool call records, want %d:\n%s", len(toolCalls), len(calls), log.String())
	}
	for i, r := range toolCalls[:min(len(calls), len(toolCalls))] {
		c := calls[i]
		want := map[string]any{"level": "INFO", "session": name, "tool": c.tool, "result": c.result, "bytes_in": float64(len(c.input))}
		for k, v := range want {
			if r[k] != v {
				t.Errorf("call %d (%s): %s = %v, want %v", i, c.tool, k, r[k], v)
			}
		}
		if d, ok := r["duration"].(float64); !ok || d <= 0 {
			t.Errorf("call %d: duration %v", i, r["duration"])
		}
		if n, ok := r["bytes_out"].(float64); !ok || n <= 0 {
			t.Errorf("call %d: bytes_out %v", i, r["bytes_out"])
		}
	}

	var got []string
	for _, r := range actions {
		if r["level"] != "INFO" || r["backend"] != backend || r["outcome"] != "ok" {
			t.Errorf("lifecycle record %v", r)
		}
		if _, ok := r["duration"].(float64); !ok {
			t.Errorf("lifecycle record without a duration: %v", r)
		}
		if r["action"] == "attach" {
			continue // every command on NAME attaches
		}
		got = append(got, fmt.Sprintf("%s %s", r["action"], r["session"]))
		if r["action"] == "fork" && r["fork"] != fork {
			t.Errorf("fork record names the fork %v, want %s", r["fork"], fork)
		}
	}
	want := []string{"create " + name, "pause " + name, "resume " + name, "fork " + name, "close " + name, "close " + fork}
	if !slices.Equal(got, want) {
		t.Errorf("lifecycle records %q, want %q", got, want)
	}

	// All of stderr: the log and the commands' own messages.
	for what, planted := range map[string]string{"secret": secret, "file body": body, "command text": encoded} {
		if strings.Contains(log.String(), planted) {
			t.Errorf("stderr holds the planted %s %q:\n%s", what, planted, log.String())
		}
	}
}

// jsonObject renders key, value pairs as a JSON object.
func jsonObject(kv ...string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// TestRunIsAudited: run's command is a call of the session's bash tool, with
// its audit record beside the session's create and close.
func TestRunIsAudited(t *testing.T) {
	var out, log bytes.Buffer
	args := []string{"--state-dir", t.TempDir(), "--log-format", "json", "--log-level", "info",
		"run", "--backend", "local", "--outputs", t.TempDir(), "--", "echo", "hi"}
	if code := Main(args, nil, &out, &log); code != 0 {
		t.Fatalf("run exited %d; log:\n%s", code, log.String())
	}
	var got []string
	for line := range strings.Lines(log.String()) {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) != nil {
			continue // run's own lines, such as "no output files"
		}
		got = append(got, fmt.Sprintf("%v %v%v %v %v", r["msg"], r["action"], r["tool"], r["result"], r["session"] != nil))
	}
	want := []string{"session lifecycle create<nil> <nil> true", "tool call <nil>bash ok true", "session lifecycle close<nil> <nil> true"}
	if !slices.Equal(got, want) {
		t.Fatalf("records %q, want %q; log:\n%s", got, want, log.String())
	}
}
