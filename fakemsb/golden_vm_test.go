//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vmDir holds the real msb's answers once a microVM boots, captured in the
// real-VM suite by scripts/capture-msb-vm.sh.
const vmDir = "../msb/testdata/real-0.6.18-vm"

// knownVMDifferences are the cases fakemsb still answers otherwise, each
// with why; TestMatchesRealVM fails once one matches.
var knownVMDifferences = map[string]string{
	"exec-missing-workdir": "msb 0.6.18 says it cannot spawn the program in a missing workdir (127); " +
		"fakemsb, and the guest agent's channel with it, still answer 255 with no word, as 0.6.14 did",
}

// TestMatchesRealVM replays the cases captured in a booted microVM, in
// order, with their stdin and the capture's pauses between them (a case
// that asks whether the processes an earlier one left have done their
// work must not come sooner than it came in the VM), against one fakemsb
// state directory, and requires the real msb's exit code, stdout and
// stderr for each case marked "fake": what fakemsb's guests answer where
// the project's tests use them in place of a VM.
func TestMatchesRealVM(t *testing.T) {
	f := newFx(t)
	f.guestImage = true
	work := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(work, "in.txt"), []byte("capture\n"), 0o644))
	f.env = []string{"FAKEMSB_IMAGES=capture/vm:1"}
	list, err := os.ReadFile(filepath.Join(vmDir, "cases"))
	require.NoError(t, err)
	compared := 0
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		name, compare, _ := strings.Cut(line, " ")
		if name == "pause" {
			seconds, err := strconv.Atoi(compare)
			require.NoError(t, err, "cases: %q", line)
			time.Sleep(time.Duration(seconds) * time.Second)
			continue
		}
		read := func(ext string) string {
			b, err := os.ReadFile(filepath.Join(vmDir, name+"."+ext))
			require.NoError(t, err)
			return string(b)
		}
		args := strings.Split(strings.TrimSuffix(strings.ReplaceAll(read("argv"), "$WORK", work), "\n"), "\n")
		got := f.runIn(read("stdin"), args...)
		if compare != "fake" {
			continue
		}
		compared++
		want := result{read("stdout"), read("stderr"), atoi(t, strings.TrimSpace(read("exit")))}
		got = result{normalise(got.stdout, f.home, work), normalise(got.stderr, f.home, work), got.code}
		want = result{normalise(want.stdout, f.home, work), normalise(want.stderr, f.home, work), want.code}
		if why, known := knownVMDifferences[name]; known {
			assert.NotEqual(t, want, got, "case %s now matches: take it out of knownVMDifferences", name)
			t.Logf("case %s differs as known: %s", name, why)
			continue
		}
		assert.Equal(t, want, got, "case %s: msb %q", name, args)
		if file, err := os.ReadFile(filepath.Join(vmDir, name+".file")); err == nil {
			copied, err := os.ReadFile(filepath.Join(work, "out.txt"))
			require.NoError(t, err, "case %s: the file copied out", name)
			assert.Equal(t, string(file), string(copied), "case %s: the file copied out", name)
		}
	}
	assert.Greater(t, compared, 20, "too few cases compared")
}
