//go:build linux

package main

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/guestagent"
)

// --ready-fd writes the start marker and closes the descriptor before the
// builtin runs; a bad descriptor is refused before anything runs.
func TestBuiltinReadyFD(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	// The agent closes the descriptor it is given: give it a copy of w's.
	dup, err := syscall.Dup(int(w.Fd()))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	var stdout, stderr bytes.Buffer
	fd := strconv.Itoa(dup)
	code := guestagent.Main([]string{"builtin", "--ready-fd=" + fd, "no-such-builtin"}, strings.NewReader(""), &stdout, &stderr)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr.String(), `unknown builtin "no-such-builtin"`)
	got, err := io.ReadAll(r) // EOF: the agent closed its end
	require.NoError(t, err)
	assert.Equal(t, "R", string(got))

	for _, bad := range []string{"x", "1", "-3"} {
		stderr.Reset()
		code = guestagent.Main([]string{"builtin", "--ready-fd=" + bad, "ls"}, strings.NewReader(""), &stdout, &stderr)
		assert.Equal(t, 2, code, bad)
		assert.Contains(t, stderr.String(), "--ready-fd="+bad+": want a descriptor number from 3", bad)
	}
}

// A bad --userns is refused before anything starts; a descriptor that
// holds no filter fails serve before it reads a frame.
func TestServeConfinementFlags(t *testing.T) {
	for _, bad := range []string{"x", "0:65534", "65534:65534", "1:", ":1", "-2:5"} {
		var stdout, stderr bytes.Buffer
		code := guestagent.Main([]string{"serve", "--userns=" + bad}, strings.NewReader(""), &stdout, &stderr)
		assert.Equal(t, 2, code, bad)
		assert.Contains(t, stderr.String(), "--userns="+bad, bad)
		assert.Empty(t, stdout.String(), bad)
	}
	f, err := os.CreateTemp(t.TempDir(), "filter")
	require.NoError(t, err)
	_, err = f.WriteString("not a filter")
	require.NoError(t, err)
	_, err = f.Seek(0, io.SeekStart)
	require.NoError(t, err)
	fd, err := syscall.Dup(int(f.Fd()))
	require.NoError(t, err)
	f.Close()
	var stdout, stderr bytes.Buffer
	code := guestagent.Main([]string{"serve", "--seccomp-fd=" + strconv.Itoa(fd)}, strings.NewReader(""), &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "are not a filter")
	assert.Empty(t, stdout.String(), "no hello before the filter is in place")
}
