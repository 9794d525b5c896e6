package mcpserver

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The scanner finds the top-level id and method whatever the key order,
// nesting, escapes and chunk boundaries, and never one from below the top.
func TestEnvelopeScanner(t *testing.T) {
	for _, tc := range []struct {
		msg, id, method string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`, `1`, "tools/call"},
		{`{"method":"tools/call","params":{"id":9,"method":"x","a":[{"id":3}]},"jsonrpc":"2.0","id":12}`, `12`, "tools/call"},
		{` { "id" : "a\"b\\" , "method" : "ping" } `, `"a\"b\\"`, "ping"},
		{`{"params":{"s":"}\",{\"id\":5"},"id":-2.5e3,"method":"m\u0041"}`, `-2.5e3`, "mA"},
		{`{"params":["id",{"id":1}],"method":"notifications/x"}`, ``, "notifications/x"},
		{`[{"id":1,"method":"ping"}]`, ``, ""},
		{`{"id":"` + string(make([]byte, maxEnvelopeValue)) + `","method":"ping"}`, ``, "ping"},
	} {
		for split := range len(tc.msg) {
			var s envelopeScanner
			_, _ = s.Write([]byte(tc.msg[:split]))
			_, _ = s.Write([]byte(tc.msg[split:]))
			assert.Equal(t, tc.id, string(s.id), "%s split at %d", tc.msg, split)
			assert.Equal(t, tc.method, s.method, "%s split at %d", tc.msg, split)
			assert.Equal(t, int64(len(tc.msg)), s.n)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	assert.Equal(t, "64 MiB", formatBytes(64<<20))
	assert.Equal(t, "64.0 MiB", formatBytes(64<<20+100))
	assert.Equal(t, "20.5 MiB", formatBytes(20<<20+1<<19))
	assert.Equal(t, "4096 bytes", formatBytes(4096))
}
