//go:build linux

package local

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// FuzzFieldOfStat: the host reads a sandbox process's start time from its
// stat line, whose command name (up to 15 bytes, parentheses and spaces
// included) a guest picks; the fields after it read right whatever it is,
// and no line makes it panic.
func FuzzFieldOfStat(f *testing.F) {
	f.Add("bash", uint64(12345), 19, []byte("1 (a) R"))
	f.Add(") R 1 1 1 (", uint64(0), 0, []byte(")"))
	f.Add("x) S 9 9 9 9", uint64(1<<40), 60, []byte{})
	f.Fuzz(func(t *testing.T, comm string, start uint64, n int, raw []byte) {
		if n >= 0 {
			fieldOfStat(raw, n)
		}
		if len(comm) > 15 || strings.ContainsRune(comm, 0) {
			return
		}
		line := fmt.Appendf(nil, "4242 (%s) S 1 4242 4242 0 -1 4194560 113 0 0 0 0 0 0 0 20 0 1 0 %d 8568832 897 18446744073709551615 1 1 0 0 0 0 0 3686404\n", comm, start)
		if got := fieldOfStat(line, 19); got != strconv.FormatUint(start, 10) {
			t.Fatalf("comm %q: start %q, want %d", comm, got, start)
		}
		if got := fieldOfStat(line, 0); got != "S" {
			t.Fatalf("comm %q: state %q", comm, got)
		}
	})
}
