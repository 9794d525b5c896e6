package tools

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// lastWritten never holds more than editMaxBytes, keeps the newest entry and
// drops a path's bytes when that path is written again or dropped.
func TestLastWrittenStaysBounded(t *testing.T) {
	var w lastWritten
	big := strings.Repeat("x", editMaxBytes/3+1)
	for _, p := range []string{"/a", "/b", "/c", "/d"} {
		w.set(p, big)
		assert.LessOrEqual(t, w.size, editMaxBytes)
		got, ok := w.get(p)
		assert.True(t, ok, p)
		assert.Equal(t, big, got, p)
	}
	assert.Len(t, w.files, 2)
	w.set("/d", "small")
	w.set("/huge", strings.Repeat("y", editMaxBytes+1))
	_, ok := w.get("/huge")
	assert.False(t, ok, "larger than the bound: not kept")
	w.drop("/d")
	_, ok = w.get("/d")
	assert.False(t, ok)
	sum := 0
	for _, c := range w.files {
		sum += len(c)
	}
	assert.Equal(t, sum, w.size)
}
