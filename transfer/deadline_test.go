package transfer

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bytes that keep moving keep a transfer alive past its stall deadline,
// through the upload's reader and the fetch's relay alike; once they stop,
// the stall ends it.
func TestMovingBytesKeepATransferAlive(t *testing.T) {
	defer SetDeadlines(500*time.Millisecond, time.Hour)()
	for _, via := range []string{"read", "relay"} {
		t.Run(via, func(t *testing.T) {
			dl, ctx, cancel := withDeadlines(context.Background(), "a test", 0)
			defer cancel(nil)
			r := &progressReader{r: strings.NewReader(strings.Repeat("x", 1000)), d: dl}
			b := make([]byte, 1)
			for start := time.Now(); time.Since(start) < 1500*time.Millisecond; {
				time.Sleep(20 * time.Millisecond)
				if via == "read" {
					_, err := r.Read(b)
					require.NoError(t, err)
				} else {
					dl.relay(io.Discard, b)
				}
			}
			require.NoError(t, ctx.Err(), "moving bytes, past three stall deadlines")
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("bytes stopped moving, and the transfer went on")
			}
			assert.True(t, dl.ended(context.Cause(ctx)))
			assert.ErrorContains(t, context.Cause(ctx), "no byte of a test moved for 500ms")
		})
	}
}
