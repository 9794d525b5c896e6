//go:build linux

package confine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Filter builds the seccomp filter every sandboxed command runs under,
// passed to bwrap with --seccomp and loaded just before the command
// executes.
//
// Hand-written with x/sys/unix's BPF constants rather than built with
// github.com/elastic/go-seccomp-bpf, for two of that library's choices a
// deny list cannot afford: a call made with another architecture's
// convention (int 0x80 on x86-64) jumps to the default action, which for
// a deny list is "allow", so every rule is bypassed; and its argument
// comparisons include the upper 32 bits, while the kernel reads int
// arguments (socket's domain, personality's persona) from the lower 32
// only, so socket(AF_VSOCK | 1<<32) would slip through. This filter
// refuses foreign-architecture and x32 calls outright and compares the
// lower 32 bits, as the kernel does. It is a few dozen instructions,
// read top to bottom.
//
// What it refuses, and why (the lists of Docker's default profile,
// sandbox-runtime and Codex, less what the namespaces already stop):
//   - unshare and clone with CLONE_NEWUSER, and clone3 (whose flags sit in
//     memory a filter cannot read; libc falls back to clone on ENOSYS): a
//     new user namespace hands its creator every capability inside it
//     (mount, raw sockets) and opens kernel surface meant for root.
//   - socket(AF_VSOCK): a network namespace does not confine vsock, so
//     under --network deny it would still reach the hypervisor's services.
//   - socket(AF_UNIX), only where Landlock cannot scope abstract sockets
//     (see StartScoped) and the sandbox shares the host's network.
//   - mount, umount2, pivot_root and the new mount API (open_tree,
//     move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr),
//     setns: filesystem and namespace changes, refused even to the
//     capabilities that preparing uploads keeps.
//   - keyctl, add_key, request_key: the kernel keyring is not namespaced.
//   - bpf, perf_event_open, userfaultfd, io_uring_setup/enter/register:
//     large kernel surface, a recurring source of privilege escalations;
//     io_uring also performs I/O the filter never sees.
//   - personality other than the ordinary personas: READ_IMPLIES_EXEC and
//     ADDR_NO_RANDOMIZE switch off exploit mitigations.
//   - prlimit64 on pid 1, the sandbox's init (where the agent is not root,
//     the init of the commands' pid namespace, their uid): a limit cut
//     under its use (CPU time, memory) lets the kernel kill it, and every
//     process with it.
//   - kexec_load, kexec_file_load, init_module, finit_module,
//     delete_module, reboot, swapon, swapoff, acct, syslog,
//     open_by_handle_at: host administration, never a sandboxed task's.
//
// ptrace stays allowed: the pid namespace holds only the call's own
// processes, so tracing reaches nothing else, and debuggers keep working.
//
// Refusals return EPERM (clone3 and foreign calls ENOSYS), so programs see
// an ordinary error rather than being killed.

// seccomp_data offsets.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

const x32Bit = 0x40000000

// FilterOptions select the parts of the filter that depend on the policy.
type FilterOptions struct {
	// DenyUnixSockets refuses socket(AF_UNIX): where abstract sockets of
	// the host are reachable and Landlock cannot scope them.
	DenyUnixSockets bool
}

// Program is a classic-BPF seccomp program.
type Program []unix.SockFilter

func (p *Program) stmt(code uint16, k uint32) { *p = append(*p, unix.SockFilter{Code: code, K: k}) }

func (p *Program) jump(code uint16, k uint32, jt, jf uint8) {
	*p = append(*p, unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k})
}

func (p *Program) loadNr()         { p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr) }
func (p *Program) loadArg(i int)   { p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, uint32(offArgs+8*i)) }
func (p *Program) ret(v uint32)    { p.stmt(unix.BPF_RET|unix.BPF_K, v) }
func errnoRet(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
func (p *Program) deny(nr uintptr) { p.denyWith(nr, unix.EPERM) }

// denyWith refuses a call whatever its arguments.
func (p *Program) denyWith(nr uintptr, e unix.Errno) {
	p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(nr), 0, 1)
	p.ret(errnoRet(e))
}

// denyIfBits refuses a call whose argument arg has any of bits set.
func (p *Program) denyIfBits(nr uintptr, arg int, bits uint32) {
	p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(nr), 0, 4)
	p.loadArg(arg)
	p.jump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, bits, 0, 1)
	p.ret(errnoRet(unix.EPERM))
	p.loadNr()
}

// denyIfEqual refuses a call whose argument arg equals v.
func (p *Program) denyIfEqual(nr uintptr, arg int, v uint32) {
	p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(nr), 0, 4)
	p.loadArg(arg)
	p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, v, 0, 1)
	p.ret(errnoRet(unix.EPERM))
	p.loadNr()
}

// denyUnlessOneOf refuses a call whose argument arg is none of allowed.
func (p *Program) denyUnlessOneOf(nr uintptr, arg int, allowed ...uint32) {
	n := len(allowed)
	p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(nr), 0, uint8(n+3))
	p.loadArg(arg)
	for i, v := range allowed {
		p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, v, uint8(n-i), 0)
	}
	p.ret(errnoRet(unix.EPERM))
	p.loadNr()
}

// Personas personality(2) may set: Linux, its 32-bit variant, with or
// without UNAME26, and 0xffffffff, which only queries.
var allowedPersonas = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// deniedCalls are refused whatever their arguments.
var deniedCalls = []uintptr{
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_SETNS,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE,
	unix.SYS_DELETE_MODULE, unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT,
	unix.SYS_SYSLOG, unix.SYS_OPEN_BY_HANDLE_AT,
}

// Filter builds the filter for this architecture.
func Filter(o FilterOptions) (Program, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("no seccomp filter for this architecture")
	}
	var p Program
	p.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch)
	p.jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, auditArch, 1, 0)
	p.ret(errnoRet(unix.ENOSYS))
	p.loadNr()
	if checkX32 {
		p.jump(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, x32Bit, 0, 1)
		p.ret(errnoRet(unix.ENOSYS))
	}
	p.denyIfBits(unix.SYS_UNSHARE, 0, unix.CLONE_NEWUSER)
	p.denyIfBits(unix.SYS_CLONE, 0, unix.CLONE_NEWUSER)
	p.denyWith(unix.SYS_CLONE3, unix.ENOSYS)
	p.denyIfEqual(unix.SYS_SOCKET, 0, unix.AF_VSOCK)
	if o.DenyUnixSockets {
		p.denyIfEqual(unix.SYS_SOCKET, 0, unix.AF_UNIX)
	}
	p.denyUnlessOneOf(unix.SYS_PERSONALITY, 0, allowedPersonas...)
	p.denyIfEqual(unix.SYS_PRLIMIT64, 0, 1)
	for _, nr := range deniedCalls {
		p.deny(nr)
	}
	p.ret(unix.SECCOMP_RET_ALLOW)
	return p, nil
}

// Bytes is the program as bwrap's --seccomp reads it: struct sock_filter
// entries in native byte order.
func (p Program) Bytes() []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.NativeEndian, []unix.SockFilter(p))
	return b.Bytes()
}

// FilterFile returns a pipe's read end holding the filter, for bwrap.
func FilterFile(o FilterOptions) (*os.File, error) {
	prog, err := Filter(o)
	if err != nil {
		return nil, err
	}
	data := prog.Bytes()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// A few hundred bytes: far below the pipe's buffer, so this never blocks.
	_, err = w.Write(data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}
