//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type logRecord struct {
	Argv []string `json:"argv"`
	Exit int      `json:"exit"`
	Ms   float64  `json:"ms"`
}

func (f *fx) records() []logRecord {
	f.t.Helper()
	file, err := os.Open(f.log)
	require.NoError(f.t, err)
	defer file.Close()
	var out []logRecord
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		var r logRecord
		require.NoError(f.t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		out = append(out, r)
	}
	return out
}

func TestVolumeLifecycle(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q", "--mount-named", "auto:/workspace")
	assert.Contains(t, f.state().Volumes, "auto", "--mount-named creates a missing volume")
	f.ok("exec", "box", "--", "sh", "-c", "echo persisted > /workspace/f")
	assert.Equal(t, 1, f.run("volume", "remove", "auto").code)
	f.ok("stop", "-q", "box")
	f.ok("volume", "remove", "-q", "auto")
	_, err := os.Stat(f.home + "/volumes/auto")
	assert.True(t, os.IsNotExist(err), "volume data is deleted")
	// The stopped sandbox now refers to a missing volume.
	assert.Equal(t, result{"", "error: volume not found: auto\n", 1}, f.run("start", "box"))
	assert.Equal(t, result{"", "", 1}, f.run("start", "-q", "box"), "-q silences start's errors")
	f.ok("remove", "-q", "box")

	// A volume outlives its sandbox and is reattached by name.
	f.ok("create", "alpine", "-n", "b1", "-q", "--mount-named", "keep:/data")
	f.ok("exec", "b1", "--", "sh", "-c", "echo v1 > /data/f")
	f.ok("remove", "-f", "-q", "b1")
	f.ok("create", "alpine", "-n", "b2", "-q", "--mount-named", "keep:/other")
	assert.Equal(t, "v1\n", f.ok("exec", "b2", "--", "cat", "/other/f").stdout)
	var vols []map[string]any
	require.NoError(t, json.Unmarshal([]byte(f.ok("volume", "list", "--format", "json").stdout), &vols))
	require.Len(t, vols, 1)
	assert.Equal(t, float64(3), vols[0]["used_bytes"])
}

func TestConcurrentInvocations(t *testing.T) {
	f := newFx(t)
	const n = 6
	var wg sync.WaitGroup
	results := make([]result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d", i)
			r := f.run("create", "alpine", "-n", name, "-q", "--mount-named", "shared:/workspace", "--label", "grp=c")
			if r.code == 0 {
				r = f.run("exec", name, "--", "sh", "-c", "echo "+name+" > /workspace/"+name)
			}
			results[i] = r
		}()
	}
	// Racing creates of one name: exactly one wins.
	same := make([]result, 4)
	for i := range same {
		wg.Add(1)
		go func() {
			defer wg.Done()
			same[i] = f.run("create", "alpine", "-n", "dup", "-q")
		}()
	}
	wg.Wait()
	for i, r := range results {
		assert.Equal(t, result{}, r, "c%d", i)
	}
	wins := 0
	for _, r := range same {
		if r.code == 0 {
			wins++
		} else {
			assert.Equal(t, result{"", "error: sandbox already exists: sandbox 'dup' already exists; remove it, start the stopped sandbox, or recreate with .replace()\n", 1}, r)
		}
	}
	assert.Equal(t, 1, wins)

	st := f.state()
	assert.Len(t, st.Sandboxes, n+1)
	assert.Len(t, st.Volumes, 1)
	for _, sb := range st.Sandboxes {
		assert.True(t, sb.Holder.alive(), sb.Name)
	}
	assert.Equal(t, "c0\nc1\nc2\nc3\nc4\nc5\n", f.ok("exec", "c0", "--", "sh", "-c", "cat /workspace/*").stdout)

	// Concurrent execs on one sandbox overlap: the lock is not held while
	// a guest command runs.
	start := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.ok("exec", "c0", "--", "sleep", "0.5")
		}()
	}
	wg.Wait()
	assert.Less(t, time.Since(start), 1500*time.Millisecond)

	recs := f.records()
	assert.Len(t, recs, 2*n+4+1+4, "one log line per invocation")
	f.ok("remove", "--force", "--label", "grp=c", "-q")
	assert.Equal(t, []string{"dup"}, sortedNames(f.state()))
}

func sortedNames(st *state) []string {
	var out []string
	for _, sb := range st.sorted() {
		out = append(out, sb.Name)
	}
	return out
}

// TestLatencyAppliesToExec: the benchmarks' msb-latency rows rely on
// FAKEMSB_LATENCY delaying every invocation, exec and copy included.
func TestLatencyAppliesToExec(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q")
	f.env = []string{"FAKEMSB_LATENCY=400ms"}
	for _, args := range [][]string{
		{"exec", "box", "--", "true"},
		{"exec", "--stream", "box", "--", "true"},
		{"copy", "box:/etc/hostname", filepath.Join(t.TempDir(), "h")},
	} {
		start := time.Now()
		f.ok(args...)
		assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "msb %v ignored FAKEMSB_LATENCY", args)
	}
}

func TestLogLatencyAndClock(t *testing.T) {
	f := newFx(t)
	f.env = []string{"FAKEMSB_LATENCY=150ms", "FAKEMSB_NOW=2030-01-02T03:04:05.678+02:00"}
	start := time.Now()
	f.ok("volume", "create", "v", "-q")
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	assert.Equal(t, `[
  {
    "capacity_bytes": null,
    "created_at": "2030-01-02T01:04:05.678+00:00",
    "disk_format": null,
    "disk_fstype": null,
    "kind": "dir",
    "name": "v",
    "quota_mib": null,
    "used_bytes": 0
  }
]
`, f.ok("volume", "list", "--format", "json").stdout)
	f.run("volume", "create", "v")
	recs := f.records()
	require.Len(t, recs, 3)
	assert.Equal(t, []string{"volume", "create", "v", "-q"}, recs[0].Argv)
	assert.Equal(t, 0, recs[0].Exit)
	assert.GreaterOrEqual(t, recs[0].Ms, 150.0)
	assert.Equal(t, 1, recs[2].Exit)

	for _, bad := range []string{"FAKEMSB_LATENCY=fast", "FAKEMSB_NOW=yesterday"} {
		f.env = []string{bad}
		r := f.run("list")
		assert.Equal(t, 2, r.code, bad)
		assert.Regexp(t, "^error: FAKEMSB_(LATENCY|NOW): ", r.stderr)
	}
}

func TestFaults(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q")

	f.env = []string{"FAKEMSB_FAULTS=exec#2=exit:1:error: boom: twice;volume-remove#1=exit:3:error: disk busy"}
	assert.Equal(t, result{"ok\n", "", 0}, f.run("exec", "box", "--", "echo", "ok"))
	assert.Equal(t, result{"", "error: boom: twice\n", 1}, f.run("exec", "box", "--", "echo", "ok"))
	assert.Equal(t, result{"ok\n", "", 0}, f.run("exec", "box", "--", "echo", "ok"))
	f.ok("volume", "create", "v", "-q")
	assert.Equal(t, result{"", "error: disk busy\n", 3}, f.run("volume", "rm", "v"))
	f.ok("volume", "rm", "-q", "v")

	// Changing the value restarts the count; a rule without #N always fires.
	f.env = []string{"FAKEMSB_FAULTS=exec#1=exit:9;ls=exit:4:error: nope"}
	assert.Equal(t, result{"", "", 9}, f.run("exec", "box", "--", "true"))
	assert.Equal(t, 0, f.run("exec", "box", "--", "true").code)
	assert.Equal(t, 4, f.run("list").code)
	assert.Equal(t, 4, f.run("ls").code)

	f.env = []string{"FAKEMSB_FAULTS=list#1=malformed"}
	r := f.run("list", "--format", "json")
	assert.Equal(t, 0, r.code)
	var v any
	assert.Error(t, json.Unmarshal([]byte(r.stdout), &v), "malformed output must not parse: %q", r.stdout)
	assert.Equal(t, "[\n  {\n    \"creat", r.stdout[:16])
	f.ok("list", "--format", "json")

	f.env = []string{"FAKEMSB_FAULTS=exec=die-after:10"}
	r = f.run("exec", "box", "--", "sh", "-c", "echo 0123456789abcdef")
	assert.Equal(t, -1, r.code, "killed by a signal")
	assert.Equal(t, "0123456789", r.stdout)
	s := uniqueSleep(t)
	r = f.run("exec", "--stream", "box", "--", "sh", "-c", "echo 01234; sleep 0.2; echo 56789abc >&2; exec sleep "+s)
	assert.Equal(t, -1, r.code)
	assert.Equal(t, result{"01234\n", "5678", -1}, r)
	awaitProcs(t, 0, "sleep", s)

	f.env = []string{"FAKEMSB_FAULTS=exec=delay:300ms"}
	began := time.Now()
	assert.Equal(t, result{"ok\n", "", 0}, f.run("exec", "box", "--", "echo", "ok"))
	assert.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "the delay comes first")

	f.env = []string{"FAKEMSB_FAULTS=create=hang"}
	cmd := f.cmd("create", "alpine", "-n", "never", "-q")
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("hang fault returned: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	<-done
	assert.NotContains(t, f.state().Sandboxes, "never")

	recs := f.records()
	last := recs[len(recs)-1]
	assert.Equal(t, logRecord{Argv: []string{"create", "alpine", "-n", "never", "-q"}, Exit: -1, Ms: last.Ms}, last)

	for _, bad := range []string{"exec", "exec=explode", "exec#0=hang", "frob=hang", "exec=exit:300", "exec=die-after:x", "exec=hang:1", "exec=delay:soon", "exec=delay:-1s"} {
		f.env = []string{"FAKEMSB_FAULTS=" + bad}
		r := f.run("list")
		assert.Equal(t, 2, r.code, bad)
		assert.Regexp(t, "^error: FAKEMSB_FAULTS: rule ", r.stderr, bad)
	}
}

func TestLogCountsKilledInvocations(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q")
	cmd := f.cmd("exec", "--stream", "box", "--", "sh", "-c", "echo up; sleep 30")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	_, err = bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	f.ok("list", "-q")

	recs := f.records()
	require.Len(t, recs, 3)
	assert.Equal(t, logRecord{Argv: []string{"exec", "--stream", "box", "--", "sh", "-c", "echo up; sleep 30"}, Exit: -1}, recs[1])
	assert.Equal(t, 0, recs[2].Exit)
	assert.Greater(t, recs[2].Ms, 0.0)
}

func TestDoctorAndVersion(t *testing.T) {
	f := newFx(t)
	assert.Equal(t, "msb 0.6.18\n", f.ok("--version").stdout)
	r := f.ok("doctor")
	assert.Contains(t, r.stderr, "info Version: v0.6.18\n")
	assert.Contains(t, r.stderr, "   ✓ msb          ")
	assert.Empty(t, r.stdout)

	// As real msb on a host that cannot boot a VM: the report and the
	// reason on stderr, exit 1.
	f.env = []string{"FAKEMSB_DOCTOR=CPU virtualization is not available", "FAKEMSB_VERSION=0.6.5"}
	r = f.run("doctor")
	assert.Equal(t, 1, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "info Version: v0.6.5\n")
	assert.Contains(t, r.stderr, "   ✗ CPU virt     not found\nerror: CPU virtualization is not available\n  → ")
	assert.Equal(t, "msb 0.6.5\n", f.ok("--version").stdout)
	assert.Equal(t, 2, f.run("doctor", "--format", "json").code, "msb doctor has no --format")
}

func TestImageInspect(t *testing.T) {
	f := newFx(t)
	var img map[string]any
	require.NoError(t, json.Unmarshal([]byte(f.ok("image", "inspect", "any/ref:1", "--format", "json").stdout), &img))
	assert.Equal(t, "any/ref:1", img["reference"])
	f.env = []string{"FAKEMSB_IMAGES=a:1,b:2"}
	f.ok("image", "inspect", "b:2", "--format", "json")
	assert.Equal(t, result{"", "error: image not found: c:3\n", 1}, f.run("image", "inspect", "c:3", "--format", "json"))
	assert.Equal(t, 2, f.run("image", "nope").code)
}

// An invocation still running when a test resets the log (removes or
// truncates it) leaves the new log alone when it ends: it rewrites its
// record in place, and that place now holds other records or nothing.
func TestLogResetDuringAnInvocation(t *testing.T) {
	for _, reset := range []struct {
		name string
		do   func(path string) error
	}{
		{"removed", os.Remove},
		{"truncated", func(path string) error { return os.Truncate(path, 0) }},
	} {
		t.Run(reset.name, func(t *testing.T) {
			f := newFx(t)
			f.ok("list", "-q")
			f.ok("list", "-q")
			f.env = []string{"FAKEMSB_LATENCY=700ms"}
			slow := f.cmd("list", "-q")
			require.NoError(t, slow.Start())
			time.Sleep(300 * time.Millisecond)
			require.NoError(t, reset.do(f.log))
			f.env = nil
			f.ok("volume", "list")
			require.NoError(t, slow.Wait())
			data, err := os.ReadFile(f.log)
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			require.Len(t, lines, 1, "log after the reset: %q", data)
			var rec struct {
				Argv []string `json:"argv"`
				Exit int      `json:"exit"`
			}
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec), "%q", lines[0])
			assert.Equal(t, []string{"volume", "list"}, rec.Argv)
		})
	}
}
