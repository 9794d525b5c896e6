//go:build linux

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realDir holds the real msb's answers captured by scripts/capture-msb.sh.
const realDir = "../msb/testdata/real-0.6.18"

var (
	rfc3339Time = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}|\.\d{6}|\.\d{9})?\+00:00`)
	localTime   = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`)
	took        = regexp.MustCompile(` \(\d+\.\ds\)\n`)
)

// normalise hides what differs between two runs of the same case: times,
// how long a start or stop took (msb says it only after a VM booted or
// stopped), the state directory and the scratch directory.
func normalise(s, home, work string) string {
	s = strings.ReplaceAll(s, home, "$MSB_HOME")
	s = strings.ReplaceAll(s, work, "$WORK")
	s = rfc3339Time.ReplaceAllString(s, "<TIME>")
	s = took.ReplaceAllString(s, "\n")
	return localTime.ReplaceAllString(s, "<LOCAL TIME>")
}

// TestMatchesRealMSB replays every captured case, in order, against one
// fakemsb state directory and requires the same exit code, stdout and
// stderr as the real msb for each case marked "fake". The cases marked
// "real" (a VM boot, image digests) still run, so the state stays in step.
func TestMatchesRealMSB(t *testing.T) {
	f := newFx(t)
	work := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(work, "in.txt"), []byte("capture\n"), 0o644))
	// The --conf files of the fork cases, as capture-msb.sh writes them.
	for file, snap := range map[string]string{"snap.json": "capsnap", "nosnap.json": "capnosnap"} {
		conf := `{"image":{"snapshot":"` + snap + `"}}` + "\n"
		require.NoError(t, os.WriteFile(filepath.Join(work, file), []byte(conf), 0o644))
	}
	// The capture loaded capture/tiny:1 and nothing else.
	f.env = []string{"FAKEMSB_IMAGES=capture/tiny:1"}
	list, err := os.ReadFile(filepath.Join(realDir, "cases"))
	require.NoError(t, err)
	compared := 0
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		name, compare, _ := strings.Cut(line, " ")
		read := func(ext string) string {
			b, err := os.ReadFile(filepath.Join(realDir, name+"."+ext))
			require.NoError(t, err)
			return string(b)
		}
		args := strings.Split(strings.TrimSuffix(strings.ReplaceAll(read("argv"), "$WORK", work), "\n"), "\n")
		got := f.run(args...)
		if compare != "fake" {
			continue
		}
		compared++
		want := result{read("stdout"), read("stderr"), 0}
		want.code = atoi(t, strings.TrimSpace(read("exit")))
		got = result{normalise(got.stdout, f.home, work), normalise(got.stderr, f.home, work), got.code}
		want = result{normalise(want.stdout, f.home, work), normalise(want.stderr, f.home, work), want.code}
		assert.Equal(t, want, got, "case %s: msb %q", name, args)
	}
	assert.Greater(t, compared, 30, "too few cases compared")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, c := range s {
		require.True(t, c >= '0' && c <= '9', "exit code %q", s)
		n = n*10 + int(c-'0')
	}
	return n
}
