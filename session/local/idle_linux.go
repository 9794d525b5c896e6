package local

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A resident sandbox whose agent is older than this program's is replaced
// only while it is idle: nothing but this process's own connection is open
// on its socket (so no other process has a call in flight or could start
// one) and nothing of its calls runs (so no background process would be
// ended). The caller holds the resident lock, so no process of this
// program's connects meanwhile, and with no process of the guest's left
// nothing inside can start one. A guest can only make its sandbox look
// busy (then its agent serves on, as before), never idle while it is not:
// the connections are counted by the kernel's socket diagnostics and the
// processes by the host's /proc.

// residentIdle reports whether the resident sandbox procs name, whose
// socket is in root, is idle; false when that cannot be told.
func residentIdle(root string, procs residentProcs) bool {
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(root, residentSocket), &st); err != nil {
		return false
	}
	listening, connected, err := socketUsers(st)
	if err != nil || listening != 1 || connected != 1 {
		return false
	}
	return procs.Init.PID > 0 && startTime(procs.Init.PID) == procs.Init.Start &&
		!commandsRunIn(procs.Init.PID, os.Geteuid() == 0) // as linuxPlatform.privileged
}

// socketUsers counts the listening and connected unix sockets bound to the
// socket file st: the agent's listener and the ends it accepted (each
// shares its listener's file). It sees those of this process's network
// namespace only: a listener made in another is not counted, and its
// sandbox is then not taken for idle.
func socketUsers(st unix.Stat_t) (listening, connected int, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(fd)
	// Asked under the resident lock: an answer that never comes must not
	// hold it.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
		return 0, 0, err
	}
	if err := unix.Sendto(fd, unixDiagRequest(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, 0, err
	}
	file := socketFile{ino: uint32(st.Ino), major: unix.Major(st.Dev), minor: unix.Minor(st.Dev)}
	buf := make([]byte, 32<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, 0, err
		}
		l, c, done, err := file.count(buf[:n])
		if err != nil {
			return 0, 0, err
		}
		listening, connected = listening+l, connected+c
		if done {
			return listening, connected, nil
		}
	}
}

// The kernel's unix socket diagnostics (linux/unix_diag.h).
const (
	udiagShowVFS   = 0x2 // UDIAG_SHOW_VFS
	unixDiagVFS    = 1   // UNIX_DIAG_VFS
	tcpEstablished = 1
	tcpListen      = 10
	nlmsgHdrLen    = 16
	unixDiagMsgLen = 16
)

// unixDiagRequest asks for every listening and connected unix socket with
// the file it is bound to.
func unixDiagRequest() []byte {
	b := make([]byte, nlmsgHdrLen+24)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	req := b[nlmsgHdrLen:]
	req[0] = unix.AF_UNIX
	ne.PutUint32(req[4:], 1<<tcpListen|1<<tcpEstablished) // udiag_states
	ne.PutUint32(req[12:], udiagShowVFS)                  // udiag_show
	return b
}

// socketFile is a socket file as the diagnostics name it: its inode (the
// low 32 bits) and its file system's device.
type socketFile struct {
	ino          uint32
	major, minor uint32
}

// count reads one datagram of the diagnostics' answer: the listening and
// connected sockets bound to f in it, and whether the answer ended.
func (f socketFile) count(b []byte) (listening, connected int, done bool, err error) {
	ne := binary.NativeEndian
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			return 0, 0, false, errors.New("socket diagnostics: short message")
		}
		size, typ := ne.Uint32(b[0:]), ne.Uint16(b[4:])
		if size < nlmsgHdrLen || uint64(size) > uint64(len(b)) {
			return 0, 0, false, fmt.Errorf("socket diagnostics: message of %d bytes in %d", size, len(b))
		}
		msg := b[nlmsgHdrLen:size]
		b = b[min(len(b), nlmAlign(int(size))):]
		switch typ {
		case unix.NLMSG_DONE:
			return listening, connected, true, nil
		case unix.NLMSG_ERROR:
			if len(msg) >= 4 {
				if errno := int32(ne.Uint32(msg)); errno != 0 {
					return 0, 0, false, fmt.Errorf("socket diagnostics: %w", unix.Errno(-errno))
				}
			}
			return 0, 0, false, errors.New("socket diagnostics: error message")
		case unix.SOCK_DIAG_BY_FAMILY:
		default:
			continue
		}
		if len(msg) < unixDiagMsgLen {
			return 0, 0, false, errors.New("socket diagnostics: short socket record")
		}
		state := msg[2]
		if !f.boundIn(msg[unixDiagMsgLen:]) {
			continue
		}
		switch state {
		case tcpListen:
			listening++
		case tcpEstablished:
			connected++
		}
	}
	return listening, connected, false, nil
}

// boundIn reports whether a socket record's attributes name f as the file
// it is bound to. The device is the kernel's own encoding: major << 20 |
// minor.
func (f socketFile) boundIn(attrs []byte) bool {
	ne := binary.NativeEndian
	for len(attrs) >= 4 {
		size, typ := int(ne.Uint16(attrs[0:])), ne.Uint16(attrs[2:])
		if size < 4 || size > len(attrs) {
			return false
		}
		if typ == unixDiagVFS && size >= 12 {
			ino, dev := ne.Uint32(attrs[4:]), ne.Uint32(attrs[8:])
			return ino == f.ino && dev>>20 == f.major && dev&(1<<20-1) == f.minor
		}
		attrs = attrs[min(len(attrs), nlmAlign(size)):]
	}
	return false
}

func nlmAlign(n int) int { return (n + 3) &^ 3 }

// commandsRunIn reports whether any process of a call runs in the sandbox
// whose first process is init: as the guest's uid where the agent has
// another (privileged), or below the commands' pid namespace's own init
// where it has not. The agent and the processes that started it are
// neither. Processes that cannot be read count as calls'.
func commandsRunIn(init int, privileged bool) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := strconv.Atoi(statField(pid, 1)); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	initStatus, err := readStatus(init)
	if err != nil {
		return true
	}
	for todo := children[init]; len(todo) > 0; {
		pid := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], children[pid]...)
		st, err := readStatus(pid)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // ended since it was listed
			}
			return true
		}
		if st.runsACommand(initStatus, privileged) {
			return true
		}
	}
	return false
}

// procStatus is what commandsRunIn reads of /proc/PID/status.
type procStatus struct {
	uids  []string // real, effective, saved, file system
	nspid []string // its pid in each pid namespace it is in, outermost first
}

func readStatus(pid int) (procStatus, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procStatus{}, err
	}
	return parseStatus(b)
}

// parseStatus reads the Uid and NSpid lines of a /proc/PID/status. The
// name the process gave itself comes first, escaped by the kernel: it
// cannot add a line.
func parseStatus(b []byte) (procStatus, error) {
	var st procStatus
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch key {
		case "Uid":
			st.uids = strings.Fields(value)
		case "NSpid":
			st.nspid = strings.Fields(value)
		}
	}
	if len(st.uids) != 4 || len(st.nspid) == 0 {
		return procStatus{}, errors.New("/proc status without its Uid and NSpid lines")
	}
	return st, nil
}

// runsACommand reports whether a process under the sandbox's init runs a
// call's command: it has the guest's uid, where the agent runs as another
// host uid, or it is in a pid namespace below init's and is not that
// namespace's init (the agent's helper, which only reaps).
func (st procStatus) runsACommand(init procStatus, privileged bool) bool {
	if privileged && slices.Contains(st.uids, strconv.Itoa(guestUID)) {
		return true
	}
	return len(st.nspid) > len(init.nspid) && st.nspid[len(st.nspid)-1] != "1"
}
