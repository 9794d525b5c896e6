package omasandbox_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
)

// TestLifecycleAuditRefused: a refused create or attach still gets its
// record, with the outcome and without the option that was refused.
func TestLifecycleAuditRefused(t *testing.T) {
	var log bytes.Buffer
	lg := slog.New(slog.NewJSONHandler(&log, nil))
	if _, err := omasandbox.Open(t.Context(), omasandbox.Options{Backend: "local", WorkspaceID: "", Logger: lg}); err == nil {
		t.Fatal("Open took an empty workspace id")
	}
	if _, err := omasandbox.Attach(t.Context(), "not-a-session", omasandbox.Options{Logger: lg}); err == nil {
		t.Fatal("Attach took a name of no backend")
	}
	if _, err := omasandbox.Open(t.Context(), omasandbox.Options{Backend: "cloud", Logger: lg}); err == nil {
		t.Fatal("Open took backend cloud")
	}
	want := []map[string]any{
		{"action": "create", "backend": "local", "outcome": "invalid"},
		{"action": "attach", "session": "not-a-session", "backend": "", "outcome": "invalid"},
		{"action": "create", "backend": "cloud", "outcome": "invalid"},
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d records, want %d:\n%s", len(lines), len(want), log.String())
	}
	for i, line := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if r["level"] != "INFO" || r["msg"] != "session lifecycle" {
			t.Errorf("record %d: %v", i, r)
		}
		for k, v := range want[i] {
			if r[k] != v {
				t.Errorf("record %d: %s = %v, want %v", i, k, r[k], v)
			}
		}
	}
}
