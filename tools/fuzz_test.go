package tools

import (
	"bytes"
	"strings"
	"testing"
)

// The ls listing comes from the guest: any bytes must give a bounded,
// well-formed result without a panic.
func FuzzFormatLs(f *testing.F) {
	f.Add([]byte("f a.txt\x00d dir\x00f .env\x00"), 500)
	f.Add([]byte("d \x00x\x00f a/b\x00"), 1)
	f.Add([]byte{}, 3)
	f.Fuzz(func(t *testing.T, listing []byte, limit int) {
		if limit < 1 || limit > 1<<20 {
			return
		}
		out := formatLs(listing, limit)
		if out == "" {
			t.Fatal("empty result")
		}
		body, _, _ := strings.Cut(out, "\n\n[")
		if len(body) > readMaxBytes {
			t.Fatalf("result body of %d bytes exceeds the cap", len(body))
		}
		if !bytes.ContainsRune(listing, '\n') && out != "(empty directory)" && strings.Count(body, "\n")+1 > limit {
			t.Fatalf("more than %d entries", limit)
		}
	})
}

// The read header and body come from the guest: formatting any of them
// stays within the 2000-line / 50KB result bound.
func FuzzFormatRead(f *testing.F) {
	f.Add([]byte("a\nb\nc"), int64(1), int64(3), int64(3), int64(1), false)
	f.Add(bytes.Repeat([]byte("x\n"), 3000), int64(1), int64(3000), int64(3001), int64(1), false)
	f.Add([]byte(strings.Repeat("y", 60000)), int64(2), int64(1), int64(2), int64(60000), true)
	f.Fuzz(func(t *testing.T, body []byte, offset, selected, total, firstLen int64, limited bool) {
		if offset < 1 || selected < 0 || total < offset || firstLen < 0 {
			return
		}
		out := formatRead("p", body, offset, selected, total, firstLen, limited)
		text, _, _ := strings.Cut(out, "\n\n[")
		if len(text) > readMaxBytes+200 {
			t.Fatalf("result of %d bytes exceeds the cap", len(text))
		}
		if strings.Count(text, "\n") >= readMaxLines {
			t.Fatalf("more than %d lines", readMaxLines)
		}
	})
}
