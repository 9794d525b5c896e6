//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var fakemsbBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fakemsb-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakemsbBin = filepath.Join(dir, "fakemsb")
	if out, err := exec.Command("go", "build", "-o", fakemsbBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if left := holderProcs(""); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "holder processes left behind: %v\n", left)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// holderProcs lists live holder pids whose marker starts with prefix.
func holderProcs(prefix string) []int {
	var out []int
	for _, p := range listProcs() {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == holderEnv && strings.HasPrefix(args[i+1], prefix) && strings.Contains(args[i+1], "fakemsb-t") {
				out = append(out, p.pid)
				break
			}
		}
	}
	return out
}

// fx is one test's fakemsb state directory.
type fx struct {
	t    *testing.T
	home string
	log  string
	env  []string
	// guestImage leaves FAKEMSB_IMAGE_CONFIG unset, so commands run as
	// the guest image's user; otherwise fx plays an image without a
	// config (root in /), which the mechanics tests are written for.
	guestImage bool
}

func newFx(t *testing.T) *fx {
	dir, err := os.MkdirTemp("", "fakemsb-t")
	require.NoError(t, err)
	f := &fx{t: t, home: filepath.Join(dir, "home"), log: filepath.Join(dir, "log.jsonl")}
	t.Cleanup(func() {
		f.env = nil
		var st state
		if data, err := os.ReadFile(filepath.Join(f.home, "state.json")); err == nil {
			require.NoError(t, json.Unmarshal(data, &st))
		}
		for name := range st.Sandboxes {
			f.run("remove", "--force", "-q", name)
		}
		assert.Empty(t, holderProcs(f.home+"|"), "holders left")
		os.RemoveAll(dir)
	})
	return f
}

type result struct {
	stdout, stderr string
	code           int
}

func (f *fx) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(fakemsbBin, args...)
	cmd.Env = []string{"FAKEMSB_HOME=" + f.home, "FAKEMSB_LOG=" + f.log, "PATH=" + os.Getenv("PATH"), "NO_COLOR=1"}
	if !f.guestImage {
		cmd.Env = append(cmd.Env, "FAKEMSB_IMAGE_CONFIG={}")
	}
	cmd.Env = append(cmd.Env, f.env...)
	return cmd
}

func (f *fx) runIn(stdin string, args ...string) result {
	f.t.Helper()
	cmd := f.cmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = strings.NewReader(stdin)
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ee.ExitCode() == -1 {
			r.code = -1
		}
	default:
		f.t.Fatalf("run %v: %v", args, err)
	}
	return r
}

func (f *fx) run(args ...string) result {
	f.t.Helper()
	return f.runIn("", args...)
}

// ok runs args and requires exit 0.
func (f *fx) ok(args ...string) result {
	f.t.Helper()
	r := f.run(args...)
	require.Equal(f.t, 0, r.code, "%v: stdout=%q stderr=%q", args, r.stdout, r.stderr)
	return r
}

func (f *fx) state() *state {
	f.t.Helper()
	st := &state{}
	data, err := os.ReadFile(filepath.Join(f.home, "state.json"))
	require.NoError(f.t, err)
	require.NoError(f.t, json.Unmarshal(data, st))
	return st
}

func TestCreateExecRemove(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "--mount-named", "vol:/workspace", "-w", "/workspace", "-q")
	r := f.run("exec", "box", "--", "sh", "-c", "pwd; echo err >&2; exit 7")
	assert.Equal(t, result{"/workspace\n", "err\n", 7}, r)
	f.ok("remove", "--force", "-q", "box")
	assert.Empty(t, f.state().Sandboxes)
	assert.Contains(t, f.state().Volumes, "vol")
	assert.Empty(t, holderProcs(f.home+"|"))
}

// A failed start, as on real msb 0.6.18 (docs/msb.md): the record stays,
// Stopped, unless the create made a volume, which goes with the record.
func TestCreateFailureLeavesNothing(t *testing.T) {
	f := newFx(t)
	r := f.run("create", "alpine", "-n", "bad", "--tmpfs", "/proc/x")
	assert.Equal(t, result{"", "error: failed to start \"bad\": bwrap: Can't mkdir /proc/x: No such file or directory\n", 1}, r)
	assert.Empty(t, holderProcs(f.home+"|"))
	assert.Equal(t, statusStopped, f.state().Sandboxes["bad"].Status)
	f.ok("remove", "-q", "bad")

	r = f.run("create", "alpine", "-n", "bad", "--tmpfs", "/proc/x", "--mount-named", "fresh:/workspace")
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Empty(t, holderProcs(f.home+"|"))
	assert.Equal(t, "[]\n", f.ok("list", "--format", "json").stdout)
	assert.Empty(t, f.state().Volumes)
	assert.NoDirExists(t, filepath.Join(f.home, "volumes", "fresh"))
}
