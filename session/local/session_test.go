//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

func TestShellBasics(t *testing.T) {
	s := newTestSession(t, Options{WorkspaceID: "ws", SessionID: "basics"})
	res := sh(t, s, `echo "$1|$2"; echo err >&2; id -u; pwd; echo "$HOME"; exit 7`, "a b", "c")
	if res.ExitCode != 7 {
		t.Fatalf("exit %d, want 7; stderr %q", res.ExitCode, res.Stderr)
	}
	want := "a b|c\n65534\n/workspace\n/workspace\n"
	if string(res.Stdout) != want || string(res.Stderr) != "err\n" {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	p := s.Paths()
	if p.Workspace != "/workspace" || p.Uploads != "/mnt/session/uploads" || p.Outputs != "/mnt/session/outputs" || p.Skills != "/workspace/skills" {
		t.Fatalf("paths %+v", p)
	}
}

func TestCopyInAndAttach(t *testing.T) {
	dir := t.TempDir()
	s := newTestSession(t, Options{StateDir: dir})
	src := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(src, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, g := range []string{"/workspace/a/b/f.txt", "/mnt/session/uploads/u/f.txt", "/workspace/skills/s/f.txt"} {
		if err := s.CopyIn(ctx, src, g); err != nil {
			t.Fatalf("CopyIn %s: %v", g, err)
		}
	}
	res := sh(t, s, `cat /workspace/a/b/f.txt /mnt/session/uploads/u/f.txt; echo; stat -c %u /workspace/a/b/f.txt /mnt/session/uploads/u/f.txt /workspace/skills/s/f.txt; echo x > /mnt/session/uploads/u/g 2>/dev/null || echo denied`)
	rootOwned := "0"
	if os.Geteuid() != 0 || !s.ProcessesEndWithCall() {
		// The caller's own files, mapped to the guest uid; or, in a
		// resident sandbox, host root's files, which its user namespace
		// does not map (they show as the overflow uid, 65534).
		rootOwned = "65534"
	}
	if got, want := string(res.Stdout), "hellohello\n65534\n"+rootOwned+"\n"+rootOwned+"\ndenied\n"; got != want {
		t.Fatalf("got %q (stderr %q)", got, res.Stderr)
	}
	a, err := Attach(ctx, dir, s.Name())
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if got := string(sh(t, a, `cat a/b/f.txt`).Stdout); got != "hello" {
		t.Fatalf("attached read %q", got)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(ctx, dir, s.Name()); !errors.Is(err, session.ErrNotFound) || !strings.Contains(err.Error(), "no such session in "+dir) {
		t.Fatalf("Attach after close: %v, want ErrNotFound naming the state directory searched", err)
	}
	if _, err := s.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{}); !errors.Is(err, session.ErrGone) {
		t.Fatalf("Shell on a removed session: %v, want ErrGone", err)
	}
	if !strings.HasPrefix(s.Name(), "oma-local-") {
		t.Fatalf("name %q", s.Name())
	}
}

func TestRootPreparesUploadsAndSkills(t *testing.T) {
	s := newTestSession(t, Options{})
	ctx := context.Background()
	root := session.ShellOptions{User: "0"}
	run := func(script string, opts session.ShellOptions, args ...string) *session.Result {
		t.Helper()
		res, err := s.Shell(ctx, session.Command{Script: script, Args: args}, opts)
		if err != nil {
			t.Fatalf("%q: %v", script, err)
		}
		return res
	}
	// What the upload materialisation does, as root inside the sandbox.
	// Without host root, the user namespace maps only uid 0.
	prep := `chown 0:0 "$1" && chmod 755 "$1" && chown 65534:65534 "$2" && chmod 700 "$2" && mkdir -p "$1/docs" "$3/s/scripts" && id -u`
	if os.Geteuid() != 0 {
		prep = `chmod 755 "$1" && chmod 700 "$2" && mkdir -p "$1/docs" "$3/s/scripts" && id -u`
	}
	if res := run(prep, root, s.paths.Uploads, s.paths.Outputs, s.paths.Skills); res.ExitCode != 0 || string(res.Stdout) != "0\n" {
		t.Fatalf("root preparation: %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"/mnt/session/uploads/docs/f", "/workspace/skills/s/scripts/run.sh"} {
		if err := s.CopyIn(ctx, src, g); err != nil {
			t.Fatal(err)
		}
	}
	if res := run(`find "$1" -type d -exec chmod 755 {} + && find "$1" -type f -exec chmod 444 {} + &&
find "$2" -type f -exec chmod 444 {} + && find "$2" -path '*/scripts/*' -type f -exec chmod 555 {} +`,
		root, s.paths.Uploads, s.paths.Skills); res.ExitCode != 0 {
		t.Fatalf("normalise: %q", res.Stderr)
	}
	// Root inside is still confined: no writes to system dirs, no mounts.
	if res := run(`echo x > /etc/x 2>/dev/null && echo wrote; mount -t tmpfs none /tmp 2>/dev/null && echo mounted; echo done`, root); string(res.Stdout) != "done\n" {
		t.Fatalf("root escaped its confinement: %q", res.Stdout)
	}
	// The agent reads uploads and skills but cannot change them.
	res := run(`cat /mnt/session/uploads/docs/f; stat -c '%a %u' /mnt/session/uploads/docs/f /workspace/skills/s/scripts/run.sh /mnt/session/outputs
echo x > /mnt/session/uploads/docs/f 2>/dev/null && echo "wrote upload"
echo x > /workspace/skills/s/scripts/run.sh 2>/dev/null && echo "wrote skill"
echo out > /mnt/session/outputs/o && cat /mnt/session/outputs/o`, session.ShellOptions{})
	owner := "0"
	if os.Geteuid() != 0 || !s.ProcessesEndWithCall() {
		owner = "65534" // as in TestCopyInAndAttach
	}
	if got, want := string(res.Stdout), "data444 "+owner+"\n555 "+owner+"\n700 65534\nout\n"; got != want {
		t.Fatalf("agent view: %q %q", got, res.Stderr)
	}
	if _, err := s.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{User: "1000"}); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("user 1000: %v", err)
	}
}

func TestToolPrerequisites(t *testing.T) {
	s := newTestSession(t, Options{})
	res := sh(t, s, `set -e
printf 'x\0y' > bin; printf 'hello\n' > a.txt
rg --no-config --hidden --no-ignore --color never --files-with-matches --null -- hello /workspace | tr '\0' '\n'
if rg -qaU '\x00' bin; then echo bin-has-nul; fi
find /workspace -name '*.txt' -print0 | tr '\0' '\n'
sha256sum a.txt | cut -c1-16
OMA_GLOB_OWNER=tok setsid bash -c 'grep -l OMA_GLOB_OWNER=tok /proc/$$/environ'`)
	want := "/workspace/a.txt\nbin-has-nul\n/workspace/a.txt\n5891b5b522d5df08\n"
	if got := string(res.Stdout); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "/environ\n") {
		t.Fatalf("got %q want %q (stderr %q)", got, want, res.Stderr)
	}
}

func TestStdinAndStreaming(t *testing.T) {
	s := newTestSession(t, Options{})
	var out, errs []byte
	res, err := s.Shell(context.Background(), session.Command{Script: `cat; echo warn >&2; exit 3`}, session.ShellOptions{
		Stdin:  strings.NewReader("from stdin\n"),
		Stdout: func(b []byte) { out = append(out, b...) },
		Stderr: func(b []byte) { errs = append(errs, b...) },
	})
	if err != nil || res.ExitCode != 3 || len(res.Stdout) != 0 || len(res.Stderr) != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	if string(out) != "from stdin\n" || string(errs) != "warn\n" {
		t.Fatalf("streamed %q %q", out, errs)
	}
}

func TestWallTimeLimit(t *testing.T) {
	// The limit applies to every call, so it leaves room for a short one
	// on a loaded machine.
	s := newTestSession(t, Options{Limits: Limits{WallTime: 3 * time.Second}})
	res, err := s.Shell(context.Background(), session.Command{Script: `echo before; sleep 60`}, session.ShellOptions{GuestTimeout: time.Minute})
	if !errors.Is(err, session.ErrGuestTimeout) || string(res.Stdout) != "before\n" || res.ExitCode != 137 {
		t.Fatalf("%v %+v", err, res)
	}
	if got := string(sh(t, s, `echo ok`).Stdout); got != "ok\n" {
		t.Fatalf("after a guest timeout: %q", got)
	}
}

func TestReadOnlyMode(t *testing.T) {
	s := newTestSession(t, Options{Policy: Policy{Mode: ModeReadOnly}})
	if err := os.WriteFile(filepath.Join(s.dirs.Workspace, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := sh(t, s, `cat f; echo y > f 2>/dev/null && echo wrote; echo y > /mnt/session/outputs/o 2>/dev/null && echo wrote-out; echo y > /tmp/t && echo tmp-ok`)
	if got := string(res.Stdout); got != "xtmp-ok\n" {
		t.Fatalf("read-only: %q", got)
	}
}

func TestDangerModeAudits(t *testing.T) {
	var mu sync.Mutex
	var events []AuditEvent
	s := newTestSession(t, Options{Policy: Policy{Mode: ModeDangerFullAccess, AllowDangerous: true},
		Audit: func(e AuditEvent) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
			panic("a broken sink changes nothing")
		}})
	hostDir, err := os.MkdirTemp("", "oma-danger-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(hostDir)
	hostFile := filepath.Join(hostDir, "visible")
	if err := errors.Join(os.Chmod(hostDir, 0o755), os.WriteFile(hostFile, []byte("host"), 0o644)); err != nil {
		t.Fatal(err)
	}
	res := sh(t, s, `cat "$1"; pwd; exit 4`, hostFile)
	if string(res.Stdout) != "host/workspace\n" || res.ExitCode != 4 {
		t.Fatalf("danger mode: %q %q", res.Stdout, res.Stderr)
	}
	// A session's resident sandbox covers danger-full-access too, and its
	// calls are audited as a sandbox's per call are.
	_, want := s.plat.(residentStarter)
	if (s.Served().Resident == 1) != want {
		t.Errorf("resident calls %d, want the resident sandbox: %v", s.Served().Resident, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0].Kind != AuditStarted || events[1].Kind != AuditCompleted || events[1].ExitCode != 4 ||
		events[0].Session != s.Name() {
		t.Fatalf("events %+v", events)
	}
	// No audit outside danger mode.
	events = nil
	plain := newTestSession(t, Options{Audit: func(e AuditEvent) { events = append(events, e) }})
	sh(t, plain, `true`)
	if len(events) != 0 {
		t.Fatalf("audit outside danger mode: %+v", events)
	}
}

func TestPoisonAndClose(t *testing.T) {
	ctx := context.Background()
	s := newTestSession(t, Options{})
	sh(t, s, `echo kept > /workspace/notes.txt`)
	// Every call's processes ended with its sandbox: nothing is unknown, so
	// nothing is poisoned, and the agent's files are never removed.
	if err := s.Poison(ctx, errors.New("state unknown")); err != nil {
		t.Fatal(err)
	}
	if s.Poisoned() || !exists(filepath.Join(s.dirs.Workspace, "notes.txt")) {
		t.Fatal("poison removed the session")
	}
	if got := string(sh(t, s, `cat /workspace/notes.txt`).Stdout); got != "kept\n" {
		t.Fatalf("after poison: %q", got)
	}

	c := newTestSession(t, Options{})
	marker := "oma-test-close-" + c.Name()
	done := make(chan error, 1)
	go func() {
		_, err := c.Shell(ctx, session.Command{Script: `exec -a "$1" sleep 100`, Args: []string{marker}}, session.ShellOptions{})
		done <- err
	}()
	for len(procsWith(marker)) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, session.ErrClosed) {
		t.Fatalf("running call at close: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("close took %s", d)
	}
	noProcs(t, marker)
	if err := c.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{}); !errors.Is(err, session.ErrClosed) {
		t.Fatalf("Shell after close: %v", err)
	}
}

func TestSandboxStartFailure(t *testing.T) {
	s := newTestSession(t, Options{})
	if err := os.RemoveAll(s.dirs.Uploads); err != nil {
		t.Fatal(err)
	}
	res, err := s.Shell(context.Background(), session.Command{Script: "echo ran"}, session.ShellOptions{})
	if !errors.Is(err, session.ErrCannotStart) || !strings.Contains(err.Error(), "bwrap") || strings.Contains(string(res.Stdout), "ran") {
		t.Fatalf("%v %+v", err, res)
	}
}
