//go:build linux

package guestagent

import (
	"fmt"
	"strings"
	"testing"
)

// statLine is a /proc/PID/stat line as the kernel writes it, with the
// fields parseStat reads set and the others as a process might have them.
func statLine(comm string, state byte, ppid, pgrp, sid, flags uint32, start uint64) []byte {
	return fmt.Appendf(nil, "4242 (%s) %c %d %d %d 34816 4242 %d 113 0 0 0 0 0 0 0 20 0 1 0 %d 8568832 897 18446744073709551615 1 1 0 0 0 0 0 3686404 1266761467 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		comm, state, ppid, pgrp, sid, flags, start)
}

// FuzzParseStat: a command names its process (comm: up to 15 bytes,
// spaces and parentheses included), so the supervisor must read the
// fields after it right whatever it is, and any line without panicking.
func FuzzParseStat(f *testing.F) {
	f.Add("bash", byte('S'), uint32(1), uint32(7), uint32(7), uint32(4194560), uint64(12345), []byte("1 (a) R"))
	f.Add(") 1 2 3 (", byte('Z'), uint32(0), uint32(0), uint32(0), uint32(0), uint64(0), []byte(")"))
	f.Add("x) S 9 9 9 9", byte('R'), uint32(4), uint32(5), uint32(6), uint32(4194564), uint64(1<<40), []byte{})
	f.Fuzz(func(t *testing.T, comm string, state byte, ppid, pgrp, sid, flags uint32, start uint64, raw []byte) {
		parseStat(raw)
		// The kernel's states are letters (R, S, D, Z, T, I, ...).
		isLetter := 'A' <= state && state <= 'Z' || 'a' <= state && state <= 'z'
		if len(comm) > 15 || strings.ContainsRune(comm, 0) || !isLetter {
			return
		}
		got, ok := parseStat(statLine(comm, state, ppid, pgrp, sid, flags, start))
		if state == 'Z' {
			if ok {
				t.Fatalf("a zombie read as live: %+v", got)
			}
			return
		}
		want := procStat{int(ppid), int(pgrp), int(sid), start, flags&pfExiting != 0, state == 'T' || state == 't'}
		if !ok || got != want {
			t.Fatalf("comm %q: got %+v %v, want %+v", comm, got, ok, want)
		}
	})
}
