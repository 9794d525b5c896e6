package bashproto

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func seq(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

func tailOf(output string, chunk, maxBytes, maxLines int) Shown {
	t := NewTail(maxBytes)
	for p := []byte(output); len(p) > 0; {
		n := min(chunk, len(p))
		_, _ = t.Write(p[:n])
		p = p[n:]
	}
	return t.Show(maxLines)
}

func TestTailSeq(t *testing.T) {
	out := seq(1, 100000)
	for _, chunk := range []int{1, 7, 4096, len(out)} {
		s := tailOf(out, chunk, 50<<10, 2000)
		assert.True(t, s.Truncated)
		assert.Equal(t, seq(98002, 100000), string(s.Text), "chunk %d", chunk)
		assert.Equal(t, "[Showing lines 98002-100001 of 100001. Full output: /w/x.log]", s.Note(50<<10, "/w/x.log"))
	}
}

func TestTailShapes(t *testing.T) {
	long := strings.Repeat("y", 60000)
	cases := []struct {
		name, out  string
		maxLines   int
		text, note string
	}{
		{"short", "a\nb\n", 3, "a\nb\n", ""},
		{"empty", "", 3, "", ""},
		{"no newline", "abc", 3, "abc", ""},
		{"lines", seq(1, 5), 3, "4\n5\n", "[Showing lines 4-6 of 6. Full output: L]"},
		{"lines and bytes together", strings.Repeat("0123456789\n", 10), 3, strings.Repeat("0123456789\n", 2), "[Showing lines 9-11 of 11. Full output: L]"},
		{"bytes", strings.Repeat("0123456789\n", 10), 10, strings.Repeat("0123456789\n", 2), "[Showing lines 9-11 of 11 (24B limit). Full output: L]"},
		{"partial last line", "a\n" + long, 3, long[len(long)-24:], "[Showing last 24B of line 2 (line is 58.6KB). Full output: L]"},
		{"partial utf8", "é" + strings.Repeat("é", 20), 3, strings.Repeat("é", 12), "[Showing last 24B of line 1 (line is 42B). Full output: L]"},
	}
	for _, c := range cases {
		for _, chunk := range []int{1, 5, 1 << 20} {
			s := tailOf(c.out, chunk, 24, c.maxLines)
			assert.Equal(t, c.text, string(s.Text), "%s/%d", c.name, chunk)
			note := s.Note(24, "L")
			assert.Equal(t, c.note, note, "%s/%d", c.name, chunk)
		}
	}
}

// The tail never keeps more than twice its budget, however the output comes.
func TestTailMemory(t *testing.T) {
	tl := NewTail(100)
	for range 10000 {
		_, _ = tl.Write(bytes.Repeat([]byte("z\n"), 37))
		assert.LessOrEqual(t, cap(tl.buf), 4*101)
	}
}

// referenceShow is the seed's tail truncation applied to the whole output.
func referenceShow(out []byte, maxBytes, maxLines int) Shown {
	lines := bytes.Split(out, []byte{'\n'})
	total := int64(len(lines))
	if len(lines) <= maxLines && len(out) <= maxBytes {
		return Shown{Text: out, FirstLine: 1, LastLine: total, TotalLines: total}
	}
	var kept [][]byte
	size, byBytes := 0, false
	for i := len(lines) - 1; i >= 0 && len(kept) < maxLines; i-- {
		add := len(lines[i])
		if len(kept) > 0 {
			add++
		}
		if size+add > maxBytes {
			byBytes = true
			break
		}
		kept = append([][]byte{lines[i]}, kept...)
		size += add
	}
	if len(kept) == 0 {
		last := lines[len(lines)-1]
		text := last[max(len(last)-maxBytes, 0):]
		for len(text) > 0 && text[0]&0xC0 == 0x80 {
			text = text[1:]
		}
		return Shown{Text: text, Truncated: true, ByBytes: true, Partial: true, FirstLine: total, LastLine: total, TotalLines: total, LineBytes: int64(len(last))}
	}
	if len(kept) == maxLines {
		byBytes = false
	}
	return Shown{Text: bytes.Join(kept, []byte{'\n'}), Truncated: true, ByBytes: byBytes,
		FirstLine: total - int64(len(kept)) + 1, LastLine: total, TotalLines: total}
}

// The tail is guest output: however it is split, Show agrees with the
// seed's truncation of the whole output and stays within the budget.
func FuzzTail(f *testing.F) {
	f.Add([]byte(seq(1, 50)), uint8(16), uint8(5), uint8(3))
	f.Add([]byte("a\n\n\nbbbbbbbbbbbbbbbbbbbbbbbbbbbb"), uint8(8), uint8(2), uint8(1))
	f.Add([]byte("éééééé\nx"), uint8(5), uint8(4), uint8(2))
	f.Fuzz(func(t *testing.T, out []byte, maxBytes, maxLines, chunk uint8) {
		if maxBytes == 0 || maxLines == 0 || chunk == 0 {
			return
		}
		got := tailOf(string(out), int(chunk), int(maxBytes), int(maxLines))
		want := referenceShow(out, int(maxBytes), int(maxLines))
		if len(got.Text) == 0 {
			got.Text = nil
		}
		if len(want.Text) == 0 {
			want.Text = nil
		}
		assert.Equal(t, want, got)
		if len(got.Text) > int(maxBytes) {
			t.Fatalf("%d bytes shown, budget %d", len(got.Text), maxBytes)
		}
	})
}
