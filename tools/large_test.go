package tools_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// allocated reports the bytes fn allocated on the host.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A 64 MiB file (2 MiB on a real VM, where msb under emulation moves tens
// of KiB a second through one exec's stdin) travels on stdin (no base64), and reading it
// back costs kilobytes of host memory: only what the result can show
// crosses over.
func TestLargeFileRoundTripMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 64 MiB")
	}
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		line := strings.Repeat("0123456789abcdef", 4) + "\n" // 65 bytes
		size := 64 << 20
		if onRealVM(t) {
			size = 2 << 20
		}
		content := strings.Repeat(line, size/len(line))
		input, err := json.Marshal(obj{"path": "big.bin", "content": content})
		require.NoError(t, err)
		sum := sha256.Sum256([]byte(content))

		var writeErr error
		writeAlloc := allocated(func() { _, writeErr = tb.Call(context.Background(), "write", input, nil) })
		require.NoError(t, writeErr)
		got := sh(t, s, `sha256sum big.bin | cut -d' ' -f1`)
		assert.Equal(t, hex.EncodeToString(sum[:])+"\n", got, "the file arrived whole")
		// Decoding the JSON input copies the content (raw field, unquoted
		// bytes, string); the transfer itself streams. Over the guest
		// agent's channel it streams in frames, 32 KiB of base64 in JSON
		// each, every chunk encoded once into its line: about three bytes
		// allocated per byte sent under the race detector, all garbage:
		// no more than the 256 KiB stdin window is alive at once.
		budget := 4 * len(content)
		if onBackend(t, "msb-channel") || onBackend(t, "local") && sharesSandbox(s) {
			budget += 4 * len(content)
		}
		assert.Less(t, writeAlloc, uint64(budget), "write allocated %d bytes", writeAlloc)

		var out string
		readAlloc := allocated(func() { out, err = tb.Call(context.Background(), "read", []byte(`{"path": "big.bin"}`), nil) })
		require.NoError(t, err)
		lines := len(content) / len(line)
		shown := 1 + (50*1024-len(line)+1)/len(line) // the first line has no separator
		note := fmt.Sprintf("\n\n[Showing lines 1-%d of %d (50.0KB limit). Use offset=%d to continue.]", shown, lines+1, shown+1)
		assert.True(t, strings.HasPrefix(out, line), "starts with the first line")
		assert.True(t, strings.HasSuffix(out, note), "ends with %q, not %q", note, out[max(0, len(out)-120):])
		assert.Len(t, out, shown*len(line)-1+len(note))
		assert.Less(t, readAlloc, uint64(2<<20), "read allocated %d bytes for a 64 MiB file", readAlloc)
		t.Logf("host bytes allocated: write %d (content %d), read %d", writeAlloc, len(content), readAlloc)
	})
}
