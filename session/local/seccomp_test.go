//go:build linux

package local

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// probeFacts runs the test binary's probe in s and returns its lines,
// after checking that it ran at all.
func probeFacts(t *testing.T, s *Session, attempts ...string) map[string]string {
	t.Helper()
	res := sh(t, s, `echo ran; ./probe `+probeArg+` "$@"`, attempts...)
	facts := map[string]string{}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			facts[k] = v
		}
	}
	if !strings.HasPrefix(string(res.Stdout), "ran\n") || len(facts) != len(attempts) {
		t.Fatalf("the probe did not run: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	return facts
}

func wantFacts(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s=%s, want %s", what, k, got[k], v)
		}
	}
}

// TestNestedUserNamespacesAreRefused: as root (and as any user), a
// sandboxed command cannot regain capabilities in a new user namespace,
// by unshare(2) or clone(2), in any mode; the seccomp filter is loaded.
func TestNestedUserNamespacesAreRefused(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare(1) not installed")
	}
	for _, pol := range []Policy{{}, {Network: NetworkUnrestricted}, {Mode: ModeDangerFullAccess, AllowDangerous: true}} {
		s := newTestSession(t, Options{Policy: pol})
		probeBinary(t, s)
		res := sh(t, s, `echo ran
unshare -U true 2>/dev/null; echo "unshare=$?"
unshare -Ur sh -c 'grep CapEff /proc/self/status; mount -t tmpfs none /tmp && echo mounted' 2>/dev/null
grep Seccomp: /proc/self/status`)
		if got, want := string(res.Stdout), "ran\nunshare=1\nSeccomp:\t2\n"; got != want {
			t.Errorf("%s/%s: %q, want %q", pol.Mode, pol.Network, got, want)
		}
		wantFacts(t, string(pol.Mode), probeFacts(t, s, "clone-userns"), map[string]string{"clone-userns": "EPERM"})
	}
}

// TestVsockIsRefused: AF_VSOCK reaches the hypervisor whatever the
// network namespace; socket() refuses it (also with high bits set in the
// domain, which the kernel drops), and /dev/vsock is not there.
func TestVsockIsRefused(t *testing.T) {
	for _, pol := range []Policy{{}, {Network: NetworkUnrestricted}, {Mode: ModeDangerFullAccess, AllowDangerous: true}} {
		s := newTestSession(t, Options{Policy: pol})
		probeBinary(t, s)
		// danger-full-access has the host's /dev, and still no vsock socket.
		if got := string(sh(t, s, `[ -e /dev/vsock ] && echo visible; echo done`).Stdout); got != "done\n" && pol.Mode != ModeDangerFullAccess {
			t.Errorf("/dev/vsock under %s: %q", pol.Network, got)
		}
		wantFacts(t, string(pol.Network), probeFacts(t, s, "vsock", "vsock-high-bits"),
			map[string]string{"vsock": "EPERM", "vsock-high-bits": "EPERM"})
	}
}

// TestKernelSurfaceIsRefused: calls that widen the kernel surface or
// switch off mitigations are refused.
func TestKernelSurfaceIsRefused(t *testing.T) {
	s := newTestSession(t, Options{})
	probeBinary(t, s)
	wantFacts(t, "default policy", probeFacts(t, s, "personality", "keyctl", "io_uring"),
		map[string]string{"personality": "EPERM", "keyctl": "EPERM", "io_uring": "EPERM"})
}

// listenAbstract serves an abstract unix socket on the host, as a
// desktop bus or a runtime's control socket would.
func listenAbstract(t *testing.T) string {
	t.Helper()
	name := "oma-test-host-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Skipf("no abstract unix sockets: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	return name
}

// TestHostAbstractUnixSocketsAreUnreachable: with the host's network
// shared, the host's abstract sockets stay out of reach, while path-based
// sockets and abstract sockets of the sandbox's own work; only
// danger-full-access reaches the host's (the control).
func TestHostAbstractUnixSocketsAreUnreachable(t *testing.T) {
	name := listenAbstract(t)
	attempts := []string{"abstract:" + name, "path-socket:/workspace", "inner-abstract:" + name + "-inner"}
	for _, pol := range []Policy{{Network: NetworkUnrestricted}, {}, {Mode: ModeReadOnly, Network: NetworkUnrestricted}} {
		s := newTestSession(t, Options{Policy: pol})
		probeBinary(t, s)
		want := map[string]string{"abstract": "EPERM", "path-socket": "ok", "inner-abstract": "ok"}
		if pol.Network != NetworkUnrestricted {
			want["abstract"] = "ECONNREFUSED" // another network namespace: no such socket
		}
		if pol.Mode == ModeReadOnly {
			attempts[1] = "path-socket:/tmp"
		}
		wantFacts(t, string(pol.Mode)+"/"+string(pol.Network), probeFacts(t, s, attempts...), want)
	}
	danger := newTestSession(t, Options{Policy: Policy{Mode: ModeDangerFullAccess, AllowDangerous: true}})
	probeBinary(t, danger)
	wantFacts(t, "danger-full-access", probeFacts(t, danger, "abstract:"+name), map[string]string{"abstract": "ok"})
}

// TestAbstractSocketsWithoutLandlock: on a kernel without Landlock's
// abstract-socket scope, a sandbox sharing the host's network gets no
// unix sockets at all (as sandbox-runtime does) rather than the host's.
func TestAbstractSocketsWithoutLandlock(t *testing.T) {
	name := listenAbstract(t)
	s := newTestSession(t, Options{Policy: Policy{Network: NetworkUnrestricted}})
	s.plat.(*linuxPlatform).landlock = 0
	probeBinary(t, s)
	wantFacts(t, "no landlock", probeFacts(t, s, "abstract:"+name, "path-socket:/workspace"),
		map[string]string{"abstract": "EPERM", "path-socket": "EPERM"})
}
