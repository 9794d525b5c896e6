//go:build linux

package msb

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run real processes: small /bin/sh scripts stand in for msb.
// They are not parallel: forking while another test writes a script can
// make exec fail with "text file busy".

// fakeMSB writes an executable /bin/sh script and returns its path.
func fakeMSB(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "msb")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// pidLines reads the leading decimal lines a script printed.
func pidLines(t *testing.T, out []byte, n int) []int {
	t.Helper()
	lines := strings.SplitN(string(out), "\n", n+1)
	if len(lines) < n {
		t.Fatalf("expected %d pid lines in %q", n, out)
	}
	pids := make([]int, n)
	for i := range n {
		pid, err := strconv.Atoi(strings.TrimSpace(lines[i]))
		if err != nil || pid <= 1 {
			t.Fatalf("line %d of %q is not a pid", i, out)
		}
		pids[i] = pid
	}
	return pids
}

// dead reports whether pid no longer runs. A zombie counts only when
// allowZombie: an orphan's reaping is up to init, not to Run.
func dead(pid int, allowZombie bool) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return allowZombie && i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// requireGone fails unless msb's own process was reaped and its
// grandchildren were killed.
func requireGone(t *testing.T, msbPID int, grandchildren ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		alive := []int{}
		if !dead(msbPID, false) {
			alive = append(alive, msbPID)
		}
		for _, p := range grandchildren {
			if !dead(p, true) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes still present (msb %d, grandchildren %v): %v", msbPID, grandchildren, alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func killAtEnd(t *testing.T, pid int) {
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
}

func TestRunBuffered(t *testing.T) {
	cli := &CLI{Path: fakeMSB(t, `printf 'out:%s\n' "$@"; printf 'warn\n' >&2`)}
	res, err := cli.Run(context.Background(), Call{Args: []string{"list", "--format", "json", "a b"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Stdout), "out:list\nout:--format\nout:json\nout:a b\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if string(res.Stderr) != "warn\n" || res.ExitCode != 0 || !slices.Equal(res.Args, []string{"list", "--format", "json", "a b"}) {
		t.Errorf("result = %+v", res)
	}
}

func TestRunEnvironmentIsScrubbed(t *testing.T) {
	t.Setenv("OMA_TEST_SECRET", "hunter2")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "hunter3")
	t.Setenv("NO_COLOR", "0")
	cli := &CLI{Path: fakeMSB(t, "env"), Env: []string{"MSB_HOME=/state", "EXTRA=a=b"}}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	res, err := cli.Run(context.Background(), Call{Args: []string{"doctor"}})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	if strings.Contains(string(res.Stdout), "hunter") {
		t.Errorf("a host secret reached msb:\n%s", res.Stdout)
	}
	for k, want := range map[string]string{"NO_COLOR": "1", "MSB_HOME": "/state", "EXTRA": "a=b", "TMPDIR": tmp, "PATH": os.Getenv("PATH")} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	allowed := []string{"HOME", "PATH", "TEMP", "TMP", "TMPDIR", "NO_COLOR", "MSB_HOME", "EXTRA", "PWD", "SHLVL", "OLDPWD", "_"}
	for k := range env {
		if !slices.Contains(allowed, k) {
			t.Errorf("unexpected variable %s reached msb", k)
		}
	}
}

// TestRunPassesMSBVariables: msb's own settings must reach it, or
// oma-sandbox and the user's msb would use different homes or backends.
func TestRunPassesMSBVariables(t *testing.T) {
	want := map[string]string{}
	for _, k := range []string{
		"MSB_HOME", "MSB_BACKEND", "MSB_API_KEY", "MSB_API_URL", "MSB_PROFILE",
		"MSB_CONFIG_PATH", "MSB_PATH", "MSB_LIBKRUNFW_PATH",
		"MSB_KRUN_BOOT_TRACE", "MSB_KRUN_KERNEL_CMDLINE", "MSB_SHUTDOWN_FLUSH_TIMEOUT_MS",
	} {
		want[k] = "v-" + strings.ToLower(k)
		t.Setenv(k, want[k])
	}
	t.Setenv("MSB_NOT_MSBS", "x")
	t.Setenv("MSBX_HOME", "x")
	res, err := (&CLI{Path: fakeMSB(t, "env")}).Run(context.Background(), Call{Args: []string{"list"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"MSB_NOT_MSBS", "MSBX_HOME"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s reached msb; only msb's own variables may", k)
		}
	}
}

func TestRunPathResolution(t *testing.T) {
	script := fakeMSB(t, `echo from-oma-msb`)
	t.Setenv("OMA_MSB", script)
	res, err := (&CLI{}).Run(context.Background(), Call{Args: []string{"list"}})
	if err != nil || string(res.Stdout) != "from-oma-msb\n" {
		t.Fatalf("$OMA_MSB not used: %v, %v", res, err)
	}

	t.Setenv("OMA_MSB", "")
	t.Setenv("PATH", t.TempDir())
	res, err = (&CLI{}).Run(context.Background(), Call{Args: []string{"list"}})
	var exitErr *ExitError
	if err == nil || res != nil || errors.As(err, &exitErr) || !strings.Contains(err.Error(), `"msb"`) {
		t.Fatalf("missing msb: %v, %v; want a start error naming msb", res, err)
	}
}

func TestRunRefusesNUL(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	cli := &CLI{Path: fakeMSB(t, "touch "+marker)}
	if _, err := cli.Run(context.Background(), Call{Args: []string{"exec", "a\x00b"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("msb was started despite the refusal")
	}
}

func TestRunStdin(t *testing.T) {
	cli := &CLI{Path: fakeMSB(t, `cat; echo done`)}
	payload := []byte("line1\nbinary\x00\xff\n")
	res, err := cli.Run(context.Background(), Call{Args: []string{"exec"}, Stdin: bytes.NewReader(payload)})
	if err != nil || !bytes.Equal(res.Stdout, append(slices.Clone(payload), "done\n"...)) {
		t.Fatalf("stdin bytes: %q, %v", res.Stdout, err)
	}

	// nil stdin is /dev/null: cat sees EOF at once instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err = cli.Run(ctx, Call{Args: []string{"exec"}})
	if err != nil || string(res.Stdout) != "done\n" {
		t.Fatalf("nil stdin: %q, %v", res.Stdout, err)
	}

	// An *os.File is copied and closed too, not handed over open.
	f, err := os.CreateTemp(t.TempDir(), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("from file\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	res, err = cli.Run(ctx, Call{Args: []string{"exec"}, Stdin: f})
	if err != nil || string(res.Stdout) != "from file\ndone\n" {
		t.Fatalf("file stdin: %q, %v", res.Stdout, err)
	}

	// msb exiting without reading its stdin is not an error.
	quick := &CLI{Path: fakeMSB(t, `exit 0`)}
	if _, err := quick.Run(ctx, Call{Args: []string{"exec"}, Stdin: bytes.NewReader(make([]byte, 4<<20))}); err != nil {
		t.Fatalf("unread stdin: %v", err)
	}
}

func TestRunStreaming(t *testing.T) {
	cli := &CLI{Path: fakeMSB(t, `printf one; sleep 0.2; printf two >&2; sleep 0.2; printf three; exit 4`)}
	var mu sync.Mutex
	var events []string
	var kept [][]byte
	record := func(stream string) func([]byte) {
		return func(p []byte) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, stream+":"+string(p))
			kept = append(kept, p)
		}
	}
	res, err := cli.Run(context.Background(), Call{Args: []string{"exec", "--stream"}, Stdout: record("out"), Stderr: record("err")})
	var exitErr *ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode != 4 || res == nil || res.ExitCode != 4 {
		t.Fatalf("err = %v, res = %+v; want exit 4", err, res)
	}
	if want := []string{"out:one", "err:two", "out:three"}; !slices.Equal(events, want) {
		t.Errorf("callbacks = %q, want %q", events, want)
	}
	if res.Stdout != nil || res.Stderr != nil {
		t.Errorf("streamed output was also buffered: %+v", res)
	}
	if string(exitErr.Stderr) != "two" {
		t.Errorf("stderr kept for classification = %q, want %q", exitErr.Stderr, "two")
	}
	if string(kept[0]) != "one" {
		t.Errorf("a delivered chunk changed afterwards: %q", kept[0])
	}
}

func TestRunExitClassification(t *testing.T) {
	tests := []struct {
		name   string
		script string
		args   []string
		code   int
		msg    string
		kind   error
	}{
		{"not found", `echo 'error: sandbox not found: box1' >&2; exit 1`, []string{"remove", "box1"}, 1, "sandbox not found: box1", ErrSandboxNotFound},
		{"not found in colour", `printf '\033[1;31merror:\033[0m sandbox not found: box1\r\n' >&2; exit 1`, []string{"inspect", "box1", "--format", "json"}, 1,
			"sandbox not found: box1", ErrSandboxNotFound},
		{"volume attached", `echo 'error: invalid config: volume "v1" is attached to active sandbox "b"' >&2; exit 1`, []string{"volume", "remove", "v1"}, 1,
			`invalid config: volume "v1" is attached to active sandbox "b"`, ErrVolumeAttached},
		{"exec timed out", `echo partial; echo 'error: exec timed out after 1s' >&2; exit 1`, []string{"exec", "--timeout", "1s", "b", "--", "sleep", "9"}, 1,
			"exec timed out after 1s", ErrExecTimedOut},
		{"cannot start", `printf 'error: failed to exec "nope"\nhint: check PATH\n' >&2; exit 127`, []string{"exec", "b", "--", "nope"}, 127,
			`failed to exec "nope"`, ErrCannotStart},
		{"guest exit", `echo 'guest complaint' >&2; exit 3`, []string{"exec", "b", "--", "false"}, 3, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cli := &CLI{Path: fakeMSB(t, tt.script)}
			res, err := cli.Run(context.Background(), Call{Args: tt.args})
			var exitErr *ExitError
			if !errors.As(err, &exitErr) {
				t.Fatalf("err = %v, want *ExitError", err)
			}
			if res == nil || res.ExitCode != tt.code || exitErr.ExitCode != tt.code || exitErr.Message != tt.msg || exitErr.Kind != tt.kind {
				t.Fatalf("res = %+v, exit error = %+v", res, exitErr)
			}
			if tt.kind != nil && !errors.Is(err, tt.kind) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.kind)
			}
			if bytes.Contains(exitErr.Stderr, []byte("\x1b")) || bytes.Contains(exitErr.Stderr, []byte("\r")) {
				t.Errorf("stderr not stripped: %q", exitErr.Stderr)
			}
			want := "msb " + subcommand(tt.args) + ": exit " + strconv.Itoa(tt.code) + ": "
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Error() = %q, want prefix %q", err, want)
			}
		})
	}
}

func TestRunOutputCapKillsGroup(t *testing.T) {
	for _, tt := range []struct {
		name string
		cli  *CLI
		call Call
	}{
		{"call cap", &CLI{MaxOutput: 1 << 30}, Call{MaxOutput: 4096}},
		{"cli cap", &CLI{MaxOutput: 4096}, Call{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The pids go to a file: which of stdout and stderr reaches the
			// cap first is up to the scheduler.
			pidFile := filepath.Join(t.TempDir(), "pids")
			tt.cli.Path = fakeMSB(t, `sleep 300 & echo $! $$ >`+pidFile+`
while :; do echo 0123456789abcdef >&2; echo 0123456789abcdef; done`)
			tt.call.Args = []string{"exec", "b", "--", "yes"}
			res, err := tt.cli.Run(context.Background(), tt.call)
			var oe *OverflowError
			if !errors.As(err, &oe) || !errors.Is(err, ErrOutputOverflow) || oe.Limit != 4096 {
				t.Fatalf("err = %v, want *OverflowError with limit 4096", err)
			}
			if res == nil || len(res.Stdout)+len(res.Stderr) != 4096 {
				t.Fatalf("kept %d bytes, want exactly the cap", len(res.Stdout)+len(res.Stderr))
			}
			data, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pids := pidLines(t, bytes.ReplaceAll(data, []byte(" "), []byte("\n")), 2)
			killAtEnd(t, pids[0])
			requireGone(t, pids[1], pids[0])
		})
	}
}

func TestRunHostTimeoutKillsGroup(t *testing.T) {
	cli := &CLI{Path: fakeMSB(t, `sleep 300 & echo $!; echo $$; sleep 300`), WaitDelay: 500 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := cli.Run(ctx, Call{Args: []string{"exec", "b", "--", "sleep", "300"}})
	if !errors.Is(err, ErrHostTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrAborted) {
		t.Fatalf("err = %v, want ErrHostTimeout", err)
	}
	if res == nil || res.ExitCode != -1 {
		t.Fatalf("res = %+v, want a killed result", res)
	}
	pids := pidLines(t, res.Stdout, 2)
	killAtEnd(t, pids[0])
	requireGone(t, pids[1], pids[0])
}

func TestRunAbortKillsGroup(t *testing.T) {
	cli := &CLI{Path: fakeMSB(t, `sleep 300 & echo $!; echo $$; sleep 300`)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out bytes.Buffer
	res, err := cli.Run(ctx, Call{
		Args: []string{"exec", "b", "--", "sleep", "300"},
		Stdout: func(p []byte) {
			out.Write(p)
			if bytes.Count(out.Bytes(), []byte("\n")) >= 2 {
				cancel()
			}
		},
	})
	if !errors.Is(err, ErrAborted) || !errors.Is(err, context.Canceled) || errors.Is(err, ErrHostTimeout) {
		t.Fatalf("err = %v, want ErrAborted", err)
	}
	if res == nil || res.ExitCode != -1 {
		t.Fatalf("res = %+v, want a killed result", res)
	}
	pids := pidLines(t, out.Bytes(), 2)
	killAtEnd(t, pids[0])
	requireGone(t, pids[1], pids[0])
}

func TestRunContextDoneBeforeStart(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	cli := &CLI{Path: fakeMSB(t, "touch "+marker)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := cli.Run(ctx, Call{Args: []string{"list"}})
	if !errors.Is(err, ErrAborted) || res != nil {
		t.Fatalf("Run = %+v, %v; want ErrAborted and no result", res, err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("msb ran with a cancelled context")
	}
}

func TestRunGrandchildHoldingPipes(t *testing.T) {
	for _, tt := range []struct {
		name string
		code int
	}{{"success", 0}, {"failure", 3}} {
		t.Run(tt.name, func(t *testing.T) {
			cli := &CLI{
				Path:      fakeMSB(t, `sleep 300 & echo $!; echo bye >&2; exit `+strconv.Itoa(tt.code)),
				WaitDelay: 200 * time.Millisecond,
			}
			start := time.Now()
			res, err := cli.Run(context.Background(), Call{Args: []string{"exec", "b", "--", "sh"}})
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Fatalf("Run waited %v for a grandchild's pipes", elapsed)
			}
			if res == nil {
				t.Fatalf("no result: %v", err)
			}
			killAtEnd(t, pidLines(t, res.Stdout, 1)[0])
			if res.ExitCode != tt.code || string(res.Stderr) != "bye\n" {
				t.Fatalf("res = %+v", res)
			}
			var exitErr *ExitError
			switch {
			case tt.code == 0 && err != nil:
				t.Fatalf("err = %v, want msb's success", err)
			case tt.code != 0 && (!errors.As(err, &exitErr) || exitErr.ExitCode != tt.code):
				t.Fatalf("err = %v, want exit %d", err, tt.code)
			}
		})
	}
}

func TestRunLogsAtDebug(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cli := &CLI{Path: fakeMSB(t, `exit 2`), Logger: logger}
	_, err := cli.Run(context.Background(), Call{Args: []string{"exec", "--env", "TOKEN=s3cret", "b", "--", "env"}})
	if err == nil {
		t.Fatal("want an exit error")
	}
	log := buf.String()
	for _, want := range []string{"level=DEBUG", "msg=msb", "exit=2", "duration=", "TOKEN=<redacted>", "err="} {
		if !strings.Contains(log, want) {
			t.Errorf("log %q lacks %q", log, want)
		}
	}
	if strings.Contains(log, "s3cret") {
		t.Errorf("log leaks an env value: %q", log)
	}
}

// TestRunDiesWithItsHost kills, with SIGKILL, a process in the middle of a
// Run (this test binary started again) and requires its msb to die too: a
// host that cannot cancel its calls must not leave msb running them.
func TestRunDiesWithItsHost(t *testing.T) {
	if pidFile := os.Getenv("OMA_MSB_TEST_HOST_PIDFILE"); pidFile != "" {
		cli := &CLI{Path: fakeMSB(t, `echo $$ > "$1"; exec sleep 300`)}
		_, err := cli.Run(context.Background(), Call{Args: []string{pidFile}})
		t.Fatalf("Run returned while its host should have been killed: %v", err)
	}
	pidFile := filepath.Join(t.TempDir(), "msb.pid")
	host := exec.Command(os.Args[0], "-test.run=^TestRunDiesWithItsHost$", "-test.count=1")
	host.Env = append(os.Environ(), "OMA_MSB_TEST_HOST_PIDFILE="+pidFile)
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	var msbPID int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			msbPID = pid
			break
		}
		if time.Now().After(deadline) {
			_ = host.Process.Kill()
			_ = host.Wait()
			t.Fatal("the host process never started msb")
		}
	}
	killAtEnd(t, msbPID)
	if err := host.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = host.Wait()
	// msb is orphaned now, so init reaps it: a zombie counts as dead.
	deadline := time.Now().Add(5 * time.Second)
	for !dead(msbPID, true) {
		if time.Now().After(deadline) {
			t.Fatalf("msb %d still runs after its host was killed", msbPID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
