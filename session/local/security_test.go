//go:build linux

package local

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// countingBwrap is a bwrap that counts its invocations, so a test can
// prove that a refused call spawned nothing.
func countingBwrap(t *testing.T) (path string, count func() int) {
	t.Helper()
	real, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("bwrap not installed")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	path = filepath.Join(dir, "bwrap")
	script := "#!/bin/sh\necho x >> " + log + "\nexec " + real + ` "$@"` + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, func() int {
		data, _ := os.ReadFile(log)
		return bytes.Count(data, []byte("\n"))
	}
}

func TestWriteOutsideWorkspaceFails(t *testing.T) {
	s := newTestSession(t, Options{})
	sibling := filepath.Join(filepath.Dir(s.dirs.Root), "sibling.txt")
	if err := os.WriteFile(sibling, []byte("host"), 0o666); err != nil {
		t.Fatal(err)
	}
	varTmp := "/var/tmp/oma-sandbox-test-" + s.Name()
	res := sh(t, s, `for p in "$1" "$2" /etc/oma-sandbox-test /usr/oma-sandbox-test /workspace/../oma; do
  if echo pwned > "$p" 2>/dev/null; then echo "wrote $p"; fi
done; echo done`, sibling, varTmp)
	if got := string(res.Stdout); got != "done\n" {
		t.Fatalf("writes outside the workspace succeeded: %q", got)
	}
	if data, _ := os.ReadFile(sibling); string(data) != "host" {
		t.Fatalf("sibling changed: %q", data)
	}
	for _, p := range []string{varTmp, "/etc/oma-sandbox-test", "/usr/oma-sandbox-test"} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Fatalf("%s was created on the host", p)
		}
	}
}

func TestHostSecretsAreNotReadable(t *testing.T) {
	s := newTestSession(t, Options{})
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("TOPSECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := sh(t, s, `cat "$1" /etc/shadow /root/.bashrc "$2" 2>&1; true`, secret, filepath.Join(s.dirs.Root, recordFile))
	if strings.Contains(string(res.Stdout), "TOPSECRET") || strings.Contains(string(res.Stdout), "root:") ||
		strings.Contains(string(res.Stdout), `"workspace_id"`) {
		t.Fatalf("host secret readable: %q", res.Stdout)
	}
}

func TestSymlinkOutOfWorkspace(t *testing.T) {
	path, count := countingBwrap(t)
	s := newTestSession(t, Options{Bwrap: path})
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("TOPSECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.dirs.Workspace, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(s.dirs.Workspace, "etc")); err != nil {
		t.Fatal(err)
	}
	res := sh(t, s, `cat link/secret 2>/dev/null; echo x > link/new 2>/dev/null; echo x > etc/new 2>/dev/null; echo done`)
	if got := string(res.Stdout); got != "done\n" {
		t.Fatalf("followed a symlink to the host: %q", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Fatal("wrote through a symlink to the host")
	}
	// The host side never follows it either.
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.CopyIn(ctx, src, "/workspace/link/copied"); err == nil {
		t.Fatal("CopyIn wrote through a symlink leading out")
	}
	if _, err := os.Stat(filepath.Join(outside, "copied")); err == nil {
		t.Fatal("CopyIn wrote outside the workspace")
	}
	before := count()
	_, err := s.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{Workdir: "/workspace/link"})
	if !errors.Is(err, ErrPathEscape) {
		t.Fatalf("symlinked workdir: %v", err)
	}
	if count() != before {
		t.Fatal("a refused call spawned bwrap")
	}
}

func TestWorkdirEscapesAreRefusedBeforeSpawn(t *testing.T) {
	path, count := countingBwrap(t)
	s := newTestSession(t, Options{Bwrap: path})
	sh(t, s, `mkdir -p sub`)
	before := count()
	ctx := context.Background()
	for _, w := range []string{"/workspace/../etc", "/workspace/sub/../../etc", "/workspace-escape", "/workspaces", "../x", "sub", "/etc", "/"} {
		_, err := s.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{Workdir: w})
		if !errors.Is(err, ErrPathEscape) || !errors.Is(err, session.ErrInvalid) {
			t.Errorf("workdir %q: %v", w, err)
		}
	}
	for _, g := range []string{"/workspace/../etc/x", "/workspace-escape/x", "/mnt/session/uploads/../x", "relative/x", "/tmp/x"} {
		if err := s.CopyIn(ctx, "/etc/hostname", g); !errors.Is(err, ErrPathEscape) {
			t.Errorf("CopyIn %q: %v", g, err)
		}
	}
	if n := count(); n != before {
		t.Fatalf("refused calls spawned bwrap %d times", n-before)
	}
	if got := string(sh(t, s, `pwd`).Stdout); got != "/workspace\n" {
		t.Fatalf("pwd %q", got)
	}
	res, err := s.Shell(ctx, session.Command{Script: "pwd"}, session.ShellOptions{Workdir: "/workspace/sub"})
	if err != nil || string(res.Stdout) != "/workspace/sub\n" {
		t.Fatalf("workdir sub: %v %q", err, res.Stdout)
	}
}

func TestNetworkDeny(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	s := newTestSession(t, Options{})
	res := sh(t, s, `
(exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && echo "tcp loopback connected"
timeout 3 bash -c 'exec 3<>/dev/tcp/1.1.1.1/53' 2>/dev/null && echo "tcp 1.1.1.1 connected"
timeout 3 getent hosts example.com && echo "dns resolved"
echo done`, port)
	if got := string(res.Stdout); got != "done\n" {
		t.Fatalf("network reachable under deny: %q", got)
	}
	select {
	case <-accepted:
		t.Fatal("the host listener accepted a connection from the sandbox")
	default:
	}
}

// TestNetworkUnrestrictedReachesHost is the control for TestNetworkDeny:
// the same probe connects when the policy shares the host's network.
func TestNetworkUnrestrictedReachesHost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	s := newTestSession(t, Options{Policy: Policy{Network: NetworkUnrestricted}})
	res := sh(t, s, `(exec 3<>/dev/tcp/127.0.0.1/$1) && echo connected`, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	if string(res.Stdout) != "connected\n" {
		t.Fatalf("unrestricted network: %q %q", res.Stdout, res.Stderr)
	}
}

// A command sees no process of the host's: in a sandbox of one call,
// bwrap's init and its own; in a resident sandbox, those and the agent
// serving the calls (which it cannot reach: TestResidentAgentOutOfReach).
func TestProcessIsolation(t *testing.T) {
	for _, perCall := range []bool{true, false} {
		s := newTestSession(t, Options{SandboxPerCall: perCall})
		res := sh(t, s, `
for d in /proc/[0-9]*; do [ "$d" = /proc/$$ ] || [ "$d" = /proc/self ] || echo "proc $(tr '\0' ' ' < $d/cmdline)"; done
cat /proc/1/environ >/dev/null 2>&1 && echo "read pid 1 environ"
if [ "$1" = full ] && command -v strace >/dev/null; then timeout 5 strace -p 1 >/dev/null 2>&1 && echo "ptraced pid 1"; fi
kill -0 1 2>/dev/null && echo "signalled pid 1"
mknod /workspace/null c 1 3 2>/dev/null && echo "mknod"
grep CapEff /proc/self/status
echo done`, string(s.caps.Process.Evidence))
		out := string(res.Stdout)
		var others []string
		for l := range strings.Lines(out) {
			switch {
			case !strings.HasPrefix(l, "proc "):
			case strings.HasPrefix(l, "proc /usr/bin/bwrap "), strings.HasPrefix(l, "proc bwrap "):
				// the sandbox's init
			case !perCall && (strings.HasPrefix(l, "proc "+agentGuestPath+" serve ") || strings.HasPrefix(l, "proc oma-guest-agent serve ")):
				// the resident sandbox's agent
			case !perCall && os.Geteuid() != 0 && strings.HasPrefix(l, "proc oma-guest-agent commands-init "):
				// the init of the resident sandbox's commands, where the
				// agent is not root (resident_linux_test.go)
			case strings.HasPrefix(l, "proc bash "), l == "proc \n":
				// the command's own subshell and loop (or one just gone)
			default:
				others = append(others, l)
			}
		}
		if len(others) > 0 {
			t.Fatalf("per call %v: processes of others visible: %q", perCall, others)
		}
		if !strings.HasSuffix(out, "CapEff:\t0000000000000000\ndone\n") {
			t.Fatalf("per call %v: privileged operations allowed: %q", perCall, out)
		}
		if _, err := os.Stat(filepath.Join(s.dirs.Workspace, "null")); err == nil {
			t.Fatal("mknod created a device")
		}
	}
}

func TestSetuidBinaryGainsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a setuid-root binary")
	}
	s := newTestSession(t, Options{})
	id, err := os.ReadFile("/usr/bin/id")
	if err != nil {
		t.Skip(err)
	}
	p := filepath.Join(s.dirs.Workspace, "suid-id")
	if err := os.WriteFile(p, id, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	res := sh(t, s, `./suid-id -u; echo done`)
	if got := string(res.Stdout); got != "65534\ndone\n" {
		t.Fatalf("setuid gained privileges: %q", got)
	}
}

func TestCallerSecretsAreInvisible(t *testing.T) {
	t.Setenv("OMA_TEST_API_KEY", "hostsecret1")
	t.Setenv("OMA_TEST_PLAIN", "hostplain")
	s := newTestSession(t, Options{Env: map[string]string{"MY_TOKEN": "tok", "DB_PASSWORD": "pw", "GREETING": "hi"}})
	res := sh(t, s, `env; cat /proc/1/environ 2>/dev/null | tr '\0' '\n'`)
	out := string(res.Stdout)
	for _, bad := range []string{"hostsecret1", "hostplain", "MY_TOKEN", "DB_PASSWORD"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s visible inside: %q", bad, out)
		}
	}
	if !strings.Contains(out, "GREETING=hi\n") || !strings.Contains(out, "PATH="+guestPath+"\n") {
		t.Fatalf("session variables missing: %q", out)
	}
	if _, err := Create(context.Background(), Options{StateDir: t.TempDir(), Env: map[string]string{"PATH": "/evil"}}); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("PATH override: %v", err)
	}
}

func TestOutputFloodIsCutAtCap(t *testing.T) {
	s := newTestSession(t, Options{})
	const limit = 4 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res, err := s.Shell(context.Background(), session.Command{Script: `yes flood; yes other >&2`}, session.ShellOptions{MaxOutput: limit})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, session.ErrOutputOverflow) {
		t.Fatalf("flood: %v", err)
	}
	if n := len(res.Stdout) + len(res.Stderr); n > limit || n < limit/2 {
		t.Fatalf("kept %d bytes for a %d cap", n, limit)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8*limit {
		t.Fatalf("allocated %d bytes for a %d cap", grew, limit)
	}
	// Streaming keeps nothing in the Result and still stops at the cap.
	var streamed int
	res, err = s.Shell(context.Background(), session.Command{Script: `yes flood`}, session.ShellOptions{
		MaxOutput: limit, Stdout: func(b []byte) { streamed += len(b) }})
	if !errors.Is(err, session.ErrOutputOverflow) || streamed != limit || len(res.Stdout) != 0 {
		t.Fatalf("streamed flood: %v, %d bytes streamed, %d kept", err, streamed, len(res.Stdout))
	}
}

func TestTimeoutKillsDetachedGrandchildren(t *testing.T) {
	s := newTestSession(t, Options{})
	marker := "oma-test-grandchild-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	script := `setsid bash -c 'sleep 1; echo late > /workspace/late' </dev/null >/dev/null 2>&1 &
nohup bash -c "exec -a $1 sleep 100" </dev/null >/dev/null 2>&1 &
(trap '' HUP TERM; exec -a $1 sleep 100) &
sleep 100`
	start := time.Now()
	_, err := s.Shell(context.Background(), session.Command{Script: script, Args: []string{marker}},
		session.ShellOptions{GuestTimeout: 300 * time.Millisecond})
	if !errors.Is(err, session.ErrGuestTimeout) {
		t.Fatalf("timeout: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("kill took %s", d)
	}
	noProcs(t, marker)
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(s.dirs.Workspace, "late")); err == nil {
		t.Fatal("a detached grandchild wrote after the timeout")
	}
	if z := zombies(); len(z) > 0 {
		t.Fatalf("zombies left: %v", z)
	}
}

// The bash tool's timeout kills a background process that left the
// command's tree, session and group and dropped the call's tag from its
// environment: the agent adopted it as an orphan of the call. Where the
// agent is not root, such an orphan goes to the init of the commands' pid
// namespace, not the agent, and counts all the same.
func TestBashTimeoutKillsUntaggedOrphans(t *testing.T) {
	s := newTestSession(t, Options{})
	marker := "oma-test-orphan-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	command := `(env -u ` + bashproto.OwnerEnv + ` setsid bash -c 'exec -a ` + marker + ` sleep 100' </dev/null >/dev/null 2>&1 &)
sleep 100`
	args, stdin := bashproto.Args(bashproto.NewCall(), command, time.Second,
		bashproto.Logs{Live: "/tmp/oma-test-live", Kept: "/tmp/oma-test-kept"}, bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
	res, err := s.Shell(context.Background(), session.Command{Builtin: "bash-supervisor", Args: args},
		session.ShellOptions{Stdin: bytes.NewReader(stdin)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(res.Stdout), ":timeout:137\n") {
		t.Fatalf("not a timeout: %q %q", res.Stdout, res.Stderr)
	}
	noProcs(t, marker)
}

// zombies lists zombie children of this process.
func zombies() []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == self {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestHostDeadlineAndAbortKillTheTree(t *testing.T) {
	s := newTestSession(t, Options{})
	marker := "oma-test-abort-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	script := `setsid bash -c "exec -a $1 sleep 100" </dev/null >/dev/null 2>&1 & echo started; sleep 100`
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res, err := s.Shell(ctx, session.Command{Script: script, Args: []string{marker}}, session.ShellOptions{})
	if !errors.Is(err, session.ErrHostTimeout) || string(res.Stdout) != "started\n" || res.ExitCode != 137 {
		t.Fatalf("host deadline: %v %+v", err, res)
	}
	noProcs(t, marker)
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { time.Sleep(300 * time.Millisecond); cancel2() }()
	if _, err := s.Shell(ctx2, session.Command{Script: script, Args: []string{marker}}, session.ShellOptions{}); !errors.Is(err, session.ErrAborted) {
		t.Fatalf("abort: %v", err)
	}
	noProcs(t, marker)
	if got := string(sh(t, s, `echo ok`).Stdout); got != "ok\n" {
		t.Fatalf("session unusable after kills: %q", got)
	}
}

// TestCopyInNeverHangsOnAGuestFIFO: the guest keeps exchanging CopyIn's
// target with a FIFO. CopyIn checked the target and then opened it to
// write, without O_NONBLOCK, which blocks forever on a FIFO no one reads.
// Each CopyIn must end, copying or refusing.
func TestCopyInNeverHangsOnAGuestFIFO(t *testing.T) {
	s := newTestSession(t, Options{})
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("host data"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(s.dirs.Workspace, "a.txt")
	if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	neverBlocksOnFIFO(t, target, "CopyIn", func() error {
		return s.CopyIn(ctx, src, s.paths.Workspace+"/a.txt")
	})
}
