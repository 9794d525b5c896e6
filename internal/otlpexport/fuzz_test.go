package otlpexport

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzPartialSuccess: a collector's response, whatever its bytes, never
// panics the reader, and whenever the official types can decode it the
// reader finds the same partial success in it.
func FuzzPartialSuccess(f *testing.F) {
	for _, m := range []*coltracepb.ExportTraceServiceResponse{
		{},
		{PartialSuccess: &coltracepb.ExportTracePartialSuccess{}},
		{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 2, ErrorMessage: "too old"}},
		{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: -1}},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x0a\x05ab"))
	f.Add([]byte("\x0a\x02\x08"))
	c := &client{url: "http://collector/v1/traces", rejected: "spans"}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := c.partialSuccess(body)
		var official coltracepb.ExportTraceServiceResponse
		if proto.Unmarshal(body, &official) != nil {
			return
		}
		ps := official.GetPartialSuccess()
		var want error
		if ps.GetRejectedSpans() != 0 || ps.GetErrorMessage() != "" {
			msg := ps.GetErrorMessage()
			if msg == "" {
				msg = "empty message"
			}
			want = fmt.Errorf("OTLP partial success: %s (%d spans rejected)", msg, ps.GetRejectedSpans())
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("body %x: read %v, the official types say %v", body, got, want)
		}
	})
}

// TestGroupsInAResponse: groups, a deprecated encoding a newer collector's
// unknown fields could still use, are skipped, nested ones too, up to a
// depth; one left open, closed by another number, or nested too deep is
// malformed.
func TestGroupsInAResponse(t *testing.T) {
	c := &client{url: "http://collector/v1/traces", rejected: "spans"}
	partial := "\x0a\x04\x08\x02\x12\x00" // rejected 2, empty message
	nested := func(depth int) string {
		return strings.Repeat("\x43", depth) + strings.Repeat("\x44", depth)
	}
	for _, c2 := range []struct {
		name, body string
		want       string
	}{
		{"a group before", "\x43\x08\x01\x44" + partial, "OTLP partial success: empty message (2 spans rejected)"},
		{"nested groups after", partial + "\x4b" + nested(maxGroupDepth-1) + "\x4c", "OTLP partial success: empty message (2 spans rejected)"},
		{"nested too deep", nested(maxGroupDepth + 1), "malformed protobuf"},
		{"left open", "\x43\x08\x01", "malformed protobuf"},
		{"closed by another number", "\x43\x4c", "malformed protobuf"},
		{"closed but never opened", "\x44", "malformed protobuf"},
	} {
		t.Run(c2.name, func(t *testing.T) {
			assert.ErrorContains(t, c.partialSuccess([]byte(c2.body)), c2.want)
		})
	}
}
