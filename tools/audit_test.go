package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// TestResultClass maps what Call returns to the audit record's classes.
func TestResultClass(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	expired, stop := context.WithDeadline(live, time.Now().Add(-time.Second))
	defer stop()
	poisoned := sessiontest.NewHost(t)
	_ = poisoned.Poison(live, nil)
	cases := []struct {
		name string
		ctx  context.Context
		sess session.Session
		err  error
		want string
	}{
		{"ok", live, nil, nil, tools.ResultOK},
		{"exit", live, nil, &tools.CommandError{Text: "x", ExitCode: 3}, tools.ResultToolError},
		{"guest error", live, nil, &tools.GuestError{Tool: "read", Msg: "no such file"}, tools.ResultToolError},
		{"input", live, nil, &tools.InputError{Tool: "read", Msg: "path is required"}, tools.ResultToolError},
		{"unknown tool", live, nil, fmt.Errorf("%w: %q", tools.ErrUnknownTool, "frob"), tools.ResultToolError},
		{"output cap", live, nil, fmt.Errorf("bash: %w", session.ErrOutputOverflow), tools.ResultToolError},
		{"bash timeout", live, nil, &tools.CommandError{Text: "x", TimedOut: true}, tools.ResultGuestTimeout},
		{"guest timer", live, nil, fmt.Errorf("glob: %w", session.ErrGuestTimeout), tools.ResultGuestTimeout},
		{"host deadline", live, nil, fmt.Errorf("read: %w", session.ErrHostTimeout), tools.ResultHostTimeout},
		{"caller deadline", expired, nil, fmt.Errorf("bash: %w", session.ErrAborted), tools.ResultHostTimeout},
		{"cancelled", cancelled, nil, fmt.Errorf("bash: %w", session.ErrAborted), tools.ResultCancelled},
		{"poisoned", live, nil, fmt.Errorf("%w (no readiness marker)", session.ErrPoisoned), tools.ResultPoisoned},
		{"poisoned by the call", cancelled, poisoned, fmt.Errorf("bash: %w", session.ErrAborted), tools.ResultPoisoned},
		{"channel", live, nil, fmt.Errorf("read: %w", session.ErrChannelBroken), tools.ResultError},
		{"gone", live, nil, session.ErrGone, tools.ResultError},
	}
	for _, tc := range cases {
		s := tc.sess
		if s == nil {
			s = sessiontest.NewHost(t)
		}
		if got := tools.ResultClass(tc.ctx, s, tc.err); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestCallAudit: one Info record per call, refused ones too, with the call
// id when the context has one, and the sizes but never the contents.
func TestCallAudit(t *testing.T) {
	var log bytes.Buffer
	h := sessiontest.NewHost(t)
	tb := tools.New(h, tools.Options{Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	const body = "planted-body-7f3a"
	input := `{"path":"a.txt","content":"` + body + `"}`
	ctx := tools.WithCallID(t.Context(), "toolu_01")
	if _, err := tb.Call(ctx, "write", json.RawMessage(input), nil); err != nil {
		t.Fatal(err)
	}
	text, err := tb.Call(t.Context(), "read", json.RawMessage(`{"path":"a.txt"}`), nil)
	if err != nil || !strings.Contains(text, body) {
		t.Fatalf("read: %q, %v", text, err)
	}
	if _, err := tb.Call(t.Context(), "frob "+body, nil, nil); err == nil {
		t.Fatal("an unknown tool ran")
	}

	var records []map[string]any
	for line := range strings.Lines(log.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		records = append(records, r)
	}
	want := []map[string]any{
		{"tool": "write", "call_id": "toolu_01", "result": "ok", "bytes_in": float64(len(input))},
		{"tool": "read", "result": "ok", "bytes_out": float64(len(text))},
		{"tool": "unknown", "result": "tool_error", "bytes_in": 0.0},
	}
	if len(records) != len(want) {
		t.Fatalf("%d records, want %d:\n%s", len(records), len(want), log.String())
	}
	for i, r := range records {
		if r["level"] != "INFO" || r["msg"] != "tool call" || r["session"] != h.Name() {
			t.Errorf("record %d: %v", i, r)
		}
		if _, ok := r["duration"].(float64); !ok {
			t.Errorf("record %d has no duration: %v", i, r)
		}
		for k, v := range want[i] {
			if r[k] != v {
				t.Errorf("record %d: %s = %v, want %v", i, k, r[k], v)
			}
		}
	}
	if _, ok := records[1]["call_id"]; ok {
		t.Error("a call without an id has a call_id")
	}
	if strings.Contains(log.String(), body) {
		t.Errorf("the log holds the file's body:\n%s", log.String())
	}
}
