//go:build linux && (amd64 || arm64)

package confine

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// evalFilter runs a classic-BPF seccomp program over one call, for the
// instructions the filter uses.
func evalFilter(t *testing.T, p Program, arch uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
	var data [64]byte
	binary.NativeEndian.PutUint32(data[offNr:], nr)
	binary.NativeEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		binary.NativeEndian.PutUint64(data[offArgs+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(p); pc++ {
		in := p[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.NativeEndian.Uint32(data[in.K:])
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			var ok bool
			switch in.Code &^ (unix.BPF_JMP | unix.BPF_K) {
			case unix.BPF_JEQ:
				ok = acc == in.K
			case unix.BPF_JSET:
				ok = acc&in.K != 0
			case unix.BPF_JGE:
				ok = acc >= in.K
			}
			if ok {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		default:
			t.Fatalf("instruction %d: unexpected code %#x", pc, in.Code)
		}
	}
	t.Fatal("the program ran off its end")
	return 0
}

// TestSeccompFilterDecisions checks the filter's decisions call by call,
// including the two bypasses a generic deny-list builder leaves open.
func TestSeccompFilterDecisions(t *testing.T) {
	p, err := Filter(FilterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p) > 4096 { // BPF_MAXINSNS
		t.Fatalf("%d instructions", len(p))
	}
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eperm, enosys := errnoRet(unix.EPERM), errnoRet(unix.ENOSYS)
	for _, c := range []struct {
		what string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"read", auditArch, unix.SYS_READ, nil, allow},
		{"another architecture's calls", unix.AUDIT_ARCH_I386, 310 /* i386 unshare */, []uint64{unix.CLONE_NEWUSER}, enosys},
		{"unshare(CLONE_NEWUSER)", auditArch, unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWUSER | unix.CLONE_NEWNS}, eperm},
		{"unshare(CLONE_NEWNS)", auditArch, unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWNS}, allow},
		{"clone(CLONE_NEWUSER)", auditArch, unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm},
		{"clone for a thread", auditArch, unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND}, allow},
		{"clone3", auditArch, unix.SYS_CLONE3, nil, enosys},
		{"prlimit64 of pid 1", auditArch, unix.SYS_PRLIMIT64, []uint64{1, unix.RLIMIT_CPU, 0xdead0000}, eperm},
		{"prlimit64 of pid 1 with high bits", auditArch, unix.SYS_PRLIMIT64, []uint64{1 | 1<<32, unix.RLIMIT_CPU, 0xdead0000}, eperm},
		{"prlimit64 of itself", auditArch, unix.SYS_PRLIMIT64, []uint64{0, unix.RLIMIT_NOFILE, 0xdead0000}, allow},
		{"prlimit64 of another pid", auditArch, unix.SYS_PRLIMIT64, []uint64{42, unix.RLIMIT_NOFILE, 0xdead0000}, allow},
		{"socket(AF_VSOCK)", auditArch, unix.SYS_SOCKET, []uint64{unix.AF_VSOCK}, eperm},
		{"socket(AF_VSOCK) with high bits", auditArch, unix.SYS_SOCKET, []uint64{unix.AF_VSOCK | 1<<32}, eperm},
		{"socket(AF_INET)", auditArch, unix.SYS_SOCKET, []uint64{unix.AF_INET}, allow},
		{"socket(AF_UNIX)", auditArch, unix.SYS_SOCKET, []uint64{unix.AF_UNIX}, allow},
		{"personality(READ_IMPLIES_EXEC)", auditArch, unix.SYS_PERSONALITY, []uint64{0x0400000}, eperm},
		{"personality query", auditArch, unix.SYS_PERSONALITY, []uint64{0xffffffff}, allow},
		{"personality(PER_LINUX)", auditArch, unix.SYS_PERSONALITY, []uint64{0}, allow},
		{"mount", auditArch, unix.SYS_MOUNT, nil, eperm},
		{"bpf", auditArch, unix.SYS_BPF, nil, eperm},
		{"ptrace", auditArch, unix.SYS_PTRACE, nil, allow},
	} {
		if got := evalFilter(t, p, c.arch, c.nr, c.args...); got != c.want {
			t.Errorf("%s: %#x, want %#x", c.what, got, c.want)
		}
	}
	if checkX32 {
		if got := evalFilter(t, p, auditArch, x32Bit|unix.SYS_UNSHARE, unix.CLONE_NEWUSER); got != enosys {
			t.Errorf("x32 unshare: %#x", got)
		}
	}
	noUnix, err := Filter(FilterOptions{DenyUnixSockets: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := evalFilter(t, noUnix, auditArch, unix.SYS_SOCKET, unix.AF_UNIX); got != eperm {
		t.Errorf("socket(AF_UNIX) without Landlock: %#x", got)
	}
	if got := evalFilter(t, noUnix, auditArch, unix.SYS_SOCKET, unix.AF_INET); got != allow {
		t.Errorf("socket(AF_INET) without Landlock: %#x", got)
	}
}
