//go:build unix

package glob

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func bashCommand(t *testing.T, script string, args []string, path string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	cmd := exec.Command("/bin/bash", append([]string{"-c", script, "bash"}, args...)...)
	if path != "" {
		cmd.Env = append(os.Environ(), "PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	return cmd
}

// fakeTool puts an executable script named name in a new directory and
// returns that directory, for use earlier on PATH.
func fakeTool(t *testing.T, name, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/bash\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tagged lists the live processes whose environment holds entry.
func tagged(t *testing.T, entry string) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		env, err := os.ReadFile(d + "/environ")
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), entry) {
			continue
		}
		if stat, err := os.ReadFile(d + "/stat"); err == nil {
			if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
				continue
			}
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		pids = append(pids, pid)
	}
	return pids
}

func TestEnumerationScript(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	for _, f := range []string{"a.md", ".env", "sub/b.md", "sub/deep/c.txt", "node_modules/x/y.js", "sp ace/new\nline", outside + "/secret"} {
		if !filepath.IsAbs(f) {
			f = filepath.Join(root, f)
		}
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	// A FIFO is not a regular file: not listed, and never opened.
	if err := syscall.Mkfifo(filepath.Join(root, "sub", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside+"/secret", filepath.Join(root, "filelink")); err != nil {
		t.Fatal(err)
	}
	token := NewToken("glob")
	if !regexp.MustCompile(`^oma-glob-[0-9a-f-]{36}$`).MatchString(token) {
		t.Fatalf("token %q", token)
	}
	script, args := EnumerationScript(root, token)
	out, err := bashCommand(t, script, args, "").Output()
	if err != nil {
		t.Fatalf("enumeration: %v", err)
	}
	if !bytes.HasPrefix(out, []byte(ReadyMarker+"\x00./")) || !bytes.HasSuffix(out, []byte{0}) {
		t.Fatalf("output shape %q", out)
	}
	f := NewReadinessFilter(EnumerationProtocol)
	rest, err := f.Push(out)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCollector(EnumerationProtocol, CollectorOptions{Root: root, Base: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(rest); err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(slices.Values(c.Matches()))
	want := []string{`"sp ace/new\nline"`, ".env", "a.md", "node_modules/x/y.js", "sub/b.md", "sub/deep/c.txt"}
	if !slices.Equal(got, want) {
		t.Fatalf("enumerated %q, want %q", got, want)
	}
}

func TestEnumerationScriptMissingRoot(t *testing.T) {
	script, args := EnumerationScript(filepath.Join(t.TempDir(), "missing"), NewToken("glob"))
	out, err := bashCommand(t, script, args, "").Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("err %v, want a non-zero exit", err)
	}
	if string(out) != ReadyMarker+"\x00" {
		t.Fatalf("output %q: readiness must precede the failure", out)
	}
}

// find's status 1 (a directory it could not read or that vanished) is
// success; any other failure is the script's status, after readiness.
func TestEnumerationScriptFindStatus(t *testing.T) {
	for status, want := range map[int]int{1: 0, 2: 2, 126: 126} {
		find := fakeTool(t, "find", `printf '%s\0./a\0' `+ReadyMarker+`; echo "find: ./x: Permission denied" >&2; exit `+strconv.Itoa(status))
		script, args := EnumerationScript(t.TempDir(), NewToken("glob"))
		cmd := bashCommand(t, script, args, find)
		out, err := cmd.Output()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want || string(out) != ReadyMarker+"\x00./a\x00" {
			t.Fatalf("find exit %d: script exit %d, output %q; want exit %d", status, code, out, want)
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// startTagged starts the enumeration with a find that prints the marker and
// never ends, waits for the marker and for the tagged work (the fake find and
// its sleeps) to be running, and makes sure none of it outlives the test.
func startTagged(t *testing.T, token string) *exec.Cmd {
	t.Helper()
	entry := OwnerEnv + "=" + token
	script, args := EnumerationScript(t.TempDir(), token)
	cmd := bashCommand(t, script, args, fakeTool(t, "find", `printf '%s\0' `+ReadyMarker+`; sleep 30 & sleep 30; wait`))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range tagged(t, entry) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	marker, err := bufio.NewReader(stdout).ReadString(0)
	if err != nil || marker != ReadyMarker+"\x00" {
		t.Fatalf("marker %q, %v", marker, err)
	}
	// The marker came from work already tagged, so cleanup can find it.
	if len(tagged(t, entry)) == 0 {
		t.Fatal("readiness was published by untagged work")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(tagged(t, entry)) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("tagged processes: %v", tagged(t, entry))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd
}

func TestCleanupScript(t *testing.T) {
	token := NewToken("glob")
	entry := OwnerEnv + "=" + token
	cmd := startTagged(t, token)

	// A process carrying another token and one carrying no tag must survive.
	other := exec.Command("sleep", "30")
	other.Env = append(os.Environ(), OwnerEnv+"="+NewToken("glob"))
	plain := exec.Command("sleep", "30")
	for _, p := range []*exec.Cmd{other, plain} {
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = p.Process.Kill()
			_ = p.Wait()
		})
	}

	script, args := CleanupScript(OwnerEnv, token)
	if out, err := bashCommand(t, script, args, "").CombinedOutput(); err != nil {
		t.Fatalf("cleanup: %v: %s", err, out)
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 137 {
		t.Fatalf("enumeration ended with %v, want status 137 from the killed find", err)
	}
	if pids := tagged(t, entry); len(pids) > 0 {
		t.Fatalf("tagged processes remain: %v", pids)
	}
	for _, p := range []*exec.Cmd{other, plain} {
		if !alive(p.Process.Pid) {
			t.Fatalf("untagged process %d was killed", p.Process.Pid)
		}
	}
}

func TestCleanupScriptNothingToDo(t *testing.T) {
	script, args := CleanupScript(OwnerEnv, NewToken("glob"))
	if out, err := bashCommand(t, script, args, "").CombinedOutput(); err != nil {
		t.Fatalf("cleanup: %v: %s", err, out)
	}
}

func TestCleanupScriptReportsSurvivors(t *testing.T) {
	// With kill disabled the tagged work survives: the script must give up
	// and fail rather than claim success.
	token := NewToken("glob")
	startTagged(t, token)
	script, args := CleanupScript(OwnerEnv, token)
	script = "enable -n kill\n" + script
	out, err := bashCommand(t, script, args, fakeTool(t, "kill", "exit 0")).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "remain") {
		t.Fatalf("err %v, output %q", err, out)
	}
}
