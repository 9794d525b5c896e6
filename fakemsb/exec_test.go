//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostProcs returns the pids of live host processes whose command line is
// exactly argv.
func hostProcs(argv ...string) []int {
	want := strings.Join(argv, "\x00") + "\x00"
	var out []int
	for _, p := range listProcs() {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
		if err == nil && string(data) == want {
			out = append(out, p.pid)
		}
	}
	return out
}

// awaitProcs waits until exactly n host processes run argv.
func awaitProcs(t *testing.T, n int, argv ...string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for len(hostProcs(argv...)) != n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.Len(t, hostProcs(argv...), n, "processes %q", argv)
}

// uniqueSleep returns a sleep duration argument unlikely to collide with
// other processes on the host, so tests can find their own sleepers.
func uniqueSleep(t *testing.T) string {
	return strconv.Itoa(100000 + int(time.Now().UnixNano()/1000%800000))
}

func TestExecExitCodes(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q", "--tmpfs", "/mnt/ne:8M:noexec")
	f.ok("exec", "box", "--", "sh", "-c", "printf '#!/bin/sh\\necho hi\\n' > /tmp/noexec.sh; cp /tmp/noexec.sh /mnt/ne/x.sh; chmod +x /mnt/ne/x.sh")

	cases := []struct {
		name string
		argv []string
		want result
	}{
		{"zero", a("true"), result{"", "", 0}},
		{"seven", a("sh", "-c", "echo out; echo err >&2; exit 7"), result{"out\n", "err\n", 7}},
		{"signal", a("sh", "-c", "kill -9 $$"), result{"", "", 255}},
		{"not found", a("no-such-cmd", "x"), result{"", "error: failed to exec \"no-such-cmd\"\n  → not found: spawn \"no-such-cmd\": No such file or directory (os error 2) (ENOENT)\n  → is `no-such-cmd` on PATH inside the sandbox? Try `msb exec ... -- which no-such-cmd`\n", 127}},
		{"not found abs", a("/nope/cmd"), result{"", "error: failed to exec \"/nope/cmd\"\n  → not found: spawn \"/nope/cmd\": No such file or directory (os error 2) (ENOENT)\n  → is `/nope/cmd` on PATH inside the sandbox? Try `msb exec ... -- which /nope/cmd`\n", 127}},
		{"not executable", a("/tmp/noexec.sh"), result{"", "error: failed to exec \"/tmp/noexec.sh\"\n  → /tmp/noexec.sh: permission denied\n  → check that it is executable and not on a noexec mount\n", 126}},
		{"noexec mount", a("/mnt/ne/x.sh"), result{"", "error: failed to exec \"/mnt/ne/x.sh\"\n  → /mnt/ne/x.sh: permission denied\n  → check that it is executable and not on a noexec mount\n", 126}},
		{"directory", a("/usr"), result{"", "error: failed to exec \"/usr\"\n  → /usr: permission denied\n  → check that it is executable and not on a noexec mount\n", 126}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, f.run(append([]string{"exec", "box", "--"}, c.argv...)...))
		})
	}
}

func TestExecEnvUserWorkdir(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q", "--mount-named", "vol:/workspace", "-w", "/workspace")
	t.Setenv("FROM_HOST", "leaked")

	r := f.ok("exec", "-e", "A=1", "--env", "B=x=y", "box", "--", "env")
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	assert.ElementsMatch(t, []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "A=1", "B=x=y",
	}, got)

	assert.Equal(t, "/workspace\n", f.ok("exec", "box", "--", "pwd").stdout)
	assert.Equal(t, "/tmp\n", f.ok("exec", "-w", "/tmp", "box", "--", "pwd").stdout)
	// A missing workdir: exit 255 and no output at all.
	assert.Equal(t, result{"", "", 255}, f.run("exec", "-w", "/missing", "box", "--", "echo", "hi"))

	assert.Equal(t, "65534:65534\n", f.ok("exec", "-u", "nobody", "box", "--", "sh", "-c", `echo "$(id -u):$(id -g)"`).stdout)
	assert.Equal(t, "1234:99\n", f.ok("exec", "-u", "1234:99", "box", "--", "sh", "-c", `echo "$(id -u):$(id -g)"`).stdout)
	assert.Equal(t, "0\n", f.ok("exec", "box", "--", "id", "-u").stdout)
	// An unprivileged guest user is refused by the guest's own permissions.
	r = f.run("exec", "-u", "nobody", "box", "--", "sh", "-c", "echo x > /root/f")
	assert.Equal(t, 2, r.code)
	// Guest root cannot mount: the host is shared.
	r = f.run("exec", "box", "--", "sh", "-c", "mkdir -p /m && mount -t tmpfs t /m")
	assert.NotEqual(t, 0, r.code)
}

// TestImageConfig: as msb does with an image's config, commands run as
// the image's user with its env in its workdir unless exec says otherwise;
// by default fakemsb's images have oma-sandbox's guest image config.
func TestImageConfig(t *testing.T) {
	f := newFx(t)
	f.guestImage = true
	f.ok("create", "debian", "-n", "box", "-q")
	show := `echo "$(id -u):$(id -g) $HOME $TMPDIR $(pwd)"; touch ./w && echo writable`
	assert.Equal(t, "65534:65534 /workspace /workspace /workspace\nwritable\n", f.ok("exec", "box", "--", "sh", "-c", show).stdout)
	assert.Equal(t, "0:0 /x /workspace /tmp\nwritable\n",
		f.ok("exec", "--user", "0", "-e", "HOME=/x", "-w", "/tmp", "box", "--", "sh", "-c", show).stdout)
	var doc struct {
		Config struct {
			Env     []struct{ Key, Value string }
			Runtime struct{ User, Workdir string }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(f.ok("inspect", "box", "--format", "json").stdout), &doc))
	assert.Equal(t, "65534:65534", doc.Config.Runtime.User)
	assert.Equal(t, "/workspace", doc.Config.Runtime.Workdir)
	assert.Contains(t, doc.Config.Env, struct{ Key, Value string }{"HOME", "/workspace"})
	assert.Contains(t, doc.Config.Env, struct{ Key, Value string }{"PYTHONDONTWRITEBYTECODE", "1"})

	// Another config, kept by the sandbox created with it.
	f.env = []string{`FAKEMSB_IMAGE_CONFIG={"user":"1000:1001","env":["A=b"],"workdir":"/srv/app"}`}
	f.ok("create", "debian", "-n", "other", "-q")
	f.env = nil
	assert.Equal(t, "1000:1001 b /root /srv/app\n", f.ok("exec", "other", "--", "sh", "-c", `echo "$(id -u):$(id -g) $A $HOME $(pwd)"`).stdout)
	assert.Equal(t, "65534\n", f.ok("exec", "box", "--", "id", "-u").stdout)

	f.env = []string{`FAKEMSB_IMAGE_CONFIG={"workdir":"rel"}`}
	r := f.run("list")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "error: FAKEMSB_IMAGE_CONFIG: workdir \"rel\" is not absolute")
}

func TestExecStdin(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q")
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB: more than a pipe holds
	r := f.runIn(big, "exec", "box", "--", "sh", "-c", "wc -c")
	assert.Equal(t, result{fmt.Sprintf("%d\n", len(big)), "", 0}, r)
	r = f.runIn("hello\n", "exec", "--stream", "box", "--", "cat")
	assert.Equal(t, result{"hello\n", "", 0}, r)
	// A guest that never reads its stdin still finishes.
	r = f.runIn(big, "exec", "box", "--", "true")
	assert.Equal(t, result{"", "", 0}, r)

	// stdin is read to EOF before the command starts: nothing runs while
	// the pipe is open.
	cmd := f.cmd("exec", "box", "--", "sh", "-c", "touch /tmp/started; cat")
	w, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	_, _ = io.WriteString(w, "late\n")
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, 1, f.run("exec", "box", "--", "test", "-e", "/tmp/started").code)
	require.NoError(t, w.Close())
	b, _ := io.ReadAll(out)
	require.NoError(t, cmd.Wait())
	assert.Equal(t, "late\n", string(b))
}

// TestExecStreamStdinBothWays: with --stream, stdin reaches the command
// while it runs and its answers come back before stdin is closed, so a
// JSON-lines conversation works (msb 0.6.18).
func TestExecStreamStdinBothWays(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q")
	cmd := f.cmd("exec", "--stream", "box", "--", "sh", "-c", `while read -r l; do echo "got $l"; done`)
	w, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string)
	go func() {
		br := bufio.NewReader(out)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- l
		}
	}()
	for _, msg := range []string{`{"n":1}`, `{"n":2}`} {
		_, err := io.WriteString(w, msg+"\n")
		require.NoError(t, err)
		select {
		case l := <-lines:
			assert.Equal(t, "got "+msg+"\n", l)
		case <-time.After(5 * time.Second):
			t.Fatalf("no answer to %s while stdin is open: stdin is not streamed", msg)
		}
	}
	require.NoError(t, w.Close())
	_, open := <-lines
	assert.False(t, open, "output ends once stdin is closed")
}

func TestExecStreamChunks(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q")
	run := func(stream bool) (first time.Duration, total time.Duration, outText string) {
		args := []string{"exec", "box", "--", "sh", "-c", "echo one; sleep 0.6; echo two"}
		if stream {
			args = append([]string{"exec", "--stream"}, args[1:]...)
		}
		cmd := f.cmd(args...)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, cmd.Start())
		br := bufio.NewReader(out)
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		first = time.Since(start)
		rest, _ := io.ReadAll(br)
		require.NoError(t, cmd.Wait())
		return first, time.Since(start), line + string(rest)
	}
	first, total, text := run(true)
	assert.Equal(t, "one\ntwo\n", text)
	assert.Less(t, first, total-400*time.Millisecond, "streamed output must arrive before the command ends")
	first, total, text = run(false)
	assert.Equal(t, "one\ntwo\n", text)
	assert.Greater(t, first, total-100*time.Millisecond, "buffered output arrives at exit")
	assert.GreaterOrEqual(t, first, 550*time.Millisecond)
}

func TestExecTimeoutKillsTree(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q")
	s1, s2 := uniqueSleep(t), uniqueSleep(t)+"1"
	script := fmt.Sprintf("echo started; setsid sleep %s & sh -c 'sleep %s'", s1, s2)

	start := time.Now()
	r := f.run("exec", "--timeout", "1s", "box", "--", "sh", "-c", script)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Equal(t, result{"", "error: exec timed out after 1s\n", 1}, r, "buffered mode drops captured output")
	assert.Empty(t, hostProcs("sleep", s1))
	assert.Empty(t, hostProcs("sleep", s2))

	r = f.run("exec", "--stream", "--timeout", "1", "box", "--", "sh", "-c", script)
	assert.Equal(t, result{"started\n", "error: exec timed out after 1s\n", 1}, r, "--stream keeps what was written")
	assert.Empty(t, hostProcs("sleep", s1))
	assert.Empty(t, hostProcs("sleep", s2))
}

func TestBackgroundProcesses(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q")
	s := uniqueSleep(t)

	// A background child holding the output pipes keeps exec open.
	start := time.Now()
	r := f.ok("exec", "box", "--", "sh", "-c", "sleep 0.7 & echo main")
	assert.Equal(t, "main\n", r.stdout)
	assert.GreaterOrEqual(t, time.Since(start), 650*time.Millisecond)

	// A detached one outlives its exec and is visible to the next one.
	f.ok("exec", "box", "--", "sh", "-c", "setsid sleep "+s+" </dev/null >/dev/null 2>&1 &")
	awaitProcs(t, 1, "sleep", s)
	assert.Contains(t, f.ok("exec", "box", "--", "ps", "-eo", "args").stdout, "sleep "+s)

	f.ok("remove", "--force", "-q", "box")
	assert.Empty(t, hostProcs("sleep", s), "remove --force kills guest processes")
}

func TestStopKillsGuestsAndStartRestores(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q", "--mount-named", "vol:/workspace", "--tmpfs", "/scratch:4M")
	s := uniqueSleep(t)
	f.ok("exec", "box", "--", "sh", "-c", "echo v > /workspace/keep; echo t > /scratch/lost; setsid sleep "+s+" </dev/null >/dev/null 2>&1 &")
	awaitProcs(t, 1, "sleep", s)
	old := f.state().Sandboxes["box"].Holder
	f.ok("stop", "-q", "box")
	assert.Empty(t, hostProcs("sleep", s))
	assert.False(t, old.alive())
	assert.Empty(t, holderProcs(f.home+"|"))

	// exec on a stopped sandbox starts it for the call and stops it again.
	assert.Equal(t, "v\n", f.ok("exec", "box", "--", "cat", "/workspace/keep").stdout)
	assert.Equal(t, statusStopped, f.state().Sandboxes["box"].Status)
	assert.Empty(t, holderProcs(f.home+"|"))

	f.ok("start", "-q", "box")
	r := f.run("exec", "box", "--", "ls", "/scratch")
	assert.Equal(t, result{"", "", 0}, r, "tmpfs contents are lost on stop")
	assert.Equal(t, "v\n", f.ok("exec", "box", "--", "cat", "/workspace/keep").stdout)
}

func TestIsolation(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "a", "-q", "--no-net")
	f.ok("create", "alpine", "-n", "b", "-q")
	s := uniqueSleep(t)
	f.ok("exec", "b", "--", "sh", "-c", "setsid sleep "+s+" </dev/null >/dev/null 2>&1 &")
	awaitProcs(t, 1, "sleep", s)

	psA := f.ok("exec", "a", "--", "ps", "-eo", "pid,args").stdout
	assert.NotContains(t, psA, "sleep "+s)
	// Only a's init, its idle process, and ps itself.
	assert.Len(t, strings.Split(strings.TrimSpace(psA), "\n"), 4, psA)
	assert.Contains(t, f.ok("exec", "b", "--", "ps", "-eo", "args").stdout, "sleep "+s)
	assert.Equal(t, "a\n", f.ok("exec", "a", "--", "hostname").stdout)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	probe := "exec 3<>/dev/tcp/127.0.0.1/" + port
	assert.NotEqual(t, 0, f.run("exec", "a", "--", "bash", "-c", probe).code, "--no-net guest must not reach the host")
	assert.Equal(t, 0, f.run("exec", "b", "--", "bash", "-c", probe).code, "a guest with network reaches the host loopback")
}

func TestTmpfsLimitAndMounts(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q", "--tmpfs", "/small:1M", "--tmpfs", "/ro::ro", "--mount-named", "v:/data")
	r := f.run("exec", "box", "--", "sh", "-c", "head -c 2000000 /dev/zero > /small/f")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "No space left on device")
	r = f.run("exec", "box", "--", "sh", "-c", "touch /ro/x")
	assert.Contains(t, r.stderr, "Read-only file system")
	r = f.run("exec", "box", "--", "sh", "-c", "touch /usr/x")
	assert.Contains(t, r.stderr, "Read-only file system")
	f.ok("exec", "box", "--", "sh", "-c", "echo data > /data/f")
	b, err := os.ReadFile(f.home + "/volumes/v/f")
	require.NoError(t, err)
	assert.Equal(t, "data\n", string(b))
}
