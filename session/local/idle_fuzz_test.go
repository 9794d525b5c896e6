//go:build linux

package local

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// diagRecord is one socket of a diagnostics answer, bound to the file
// (ino, dev) in the kernel's device encoding; dev 0 with ino 0 is a socket
// bound to no file (no VFS attribute).
func diagRecord(state uint8, ino, dev uint32) []byte {
	ne := binary.NativeEndian
	body := make([]byte, unixDiagMsgLen)
	body[0], body[2] = unix.AF_UNIX, state
	// An attribute the reader skips first: UNIX_DIAG_NAME, 5 bytes, padded.
	name := []byte{9, 0, 0, 0, 'a', 'b', 'c', 'd', 'e', 0, 0, 0}
	ne.PutUint16(name[0:], 9)
	body = append(body, name...)
	if ino != 0 || dev != 0 {
		vfs := make([]byte, 12)
		ne.PutUint16(vfs[0:], 12)
		ne.PutUint16(vfs[2:], unixDiagVFS)
		ne.PutUint32(vfs[4:], ino)
		ne.PutUint32(vfs[8:], dev)
		body = append(body, vfs...)
	}
	return nlMessage(unix.SOCK_DIAG_BY_FAMILY, body)
}

func nlMessage(typ uint16, body []byte) []byte {
	b := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(body))
	binary.NativeEndian.PutUint32(b[0:], uint32(nlmsgHdrLen+len(body)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	return append(b, body...)
}

func TestSocketFileCount(t *testing.T) {
	f := socketFile{ino: 77, major: 0, minor: 42}
	dev := uint32(42) // major 0 << 20 | minor 42
	var b []byte
	b = append(b, diagRecord(tcpListen, 77, dev)...)
	b = append(b, diagRecord(tcpEstablished, 77, dev)...)
	b = append(b, diagRecord(tcpEstablished, 77, dev)...)
	b = append(b, diagRecord(tcpEstablished, 78, dev)...)      // another file
	b = append(b, diagRecord(tcpEstablished, 77, 1<<20|42)...) // another device
	b = append(b, diagRecord(tcpEstablished, 0, 0)...)         // bound to nothing
	l, c, done, err := f.count(b)
	if err != nil || l != 1 || c != 2 || done {
		t.Fatalf("count = %d, %d, %v, %v; want 1, 2, false, nil", l, c, done, err)
	}
	l, c, done, err = f.count(append(diagRecord(tcpListen, 77, dev), nlMessage(unix.NLMSG_DONE, make([]byte, 4))...))
	if err != nil || l != 1 || c != 0 || !done {
		t.Fatalf("count with the end = %d, %d, %v, %v", l, c, done, err)
	}
	errno := make([]byte, 4)
	eperm := -int32(unix.EPERM)
	binary.NativeEndian.PutUint32(errno, uint32(eperm))
	if _, _, _, err := f.count(nlMessage(unix.NLMSG_ERROR, errno)); err == nil || !strings.Contains(err.Error(), "operation not permitted") {
		t.Fatalf("an error message gave %v", err)
	}
	if _, _, _, err := f.count(diagRecord(tcpListen, 77, dev)[:20]); err == nil {
		t.Fatal("a cut message was read")
	}
}

// FuzzSocketFileCount: no answer makes the diagnostics' reader panic, and
// what it counts is never more than the records the answer holds.
func FuzzSocketFileCount(f *testing.F) {
	f.Add(diagRecord(tcpListen, 77, 42), uint32(77))
	f.Add(append(diagRecord(tcpEstablished, 77, 42), nlMessage(unix.NLMSG_DONE, nil)...), uint32(77))
	f.Add(nlMessage(unix.NLMSG_ERROR, []byte{1}), uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, ino uint32) {
		l, c, _, err := socketFile{ino: ino, minor: 42}.count(b)
		if err != nil {
			return
		}
		if l < 0 || c < 0 || (l+c)*(nlmsgHdrLen+unixDiagMsgLen) > len(b) {
			t.Fatalf("%d listening and %d connected in %d bytes", l, c, len(b))
		}
	})
}

// FuzzParseStatus: the host reads a sandbox process's uids and pids from
// its status, whose first line names the process as it named itself (the
// kernel escapes it); whatever the name, they read right, and no status
// makes the reader panic.
func FuzzParseStatus(f *testing.F) {
	f.Add("bash", []byte("Name:\tx\nUid:\t1\t1\t1\t1\nNSpid:\t7\t1\n"))
	f.Add("Uid:\t0\t0\t0\t0", []byte("NSpid:\n"))
	f.Fuzz(func(t *testing.T, name string, raw []byte) {
		if st, err := parseStatus(raw); err == nil && (len(st.uids) != 4 || len(st.nspid) == 0) {
			t.Fatalf("%q read as %+v", raw, st)
		}
		escaped := strings.NewReplacer("\\", "\\\\", "\n", "\\n").Replace(name)
		status := fmt.Sprintf("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\nPPid:\t1\nUid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nNSpid:\t4242\t3\t1\n", escaped)
		st, err := parseStatus([]byte(status))
		if err != nil || strings.Join(st.uids, " ") != "65534 65534 65534 65534" || strings.Join(st.nspid, " ") != "4242 3 1" {
			t.Fatalf("name %q: %+v, %v", name, st, err)
		}
	})
}
