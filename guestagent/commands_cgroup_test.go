//go:build linux

package guestagent

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// withCommandsCgroup stands f in for the commands group's cgroup.procs.
func withCommandsCgroup(t *testing.T, f *os.File) {
	t.Helper()
	commandsCgroup = f
	t.Cleanup(func() { commandsCgroup = nil })
}

// A command joins the group with its own pid before its program runs,
// which then runs as that process without the group's descriptor.
func TestJoinCommandsWritesItsOwnPidFirst(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	withCommandsCgroup(t, w)
	cmd := exec.Command("/bin/bash", "-c", `echo "$$ $0 $1"; [ -e /proc/$$/fd/3 ] && echo open || echo closed`, "zero", "one")
	joinCommands(cmd)
	out, err := cmd.Output()
	require.NoError(t, err)
	w.Close()
	joined, err := io.ReadAll(r)
	require.NoError(t, err)
	pid := strconv.Itoa(cmd.Process.Pid)
	assert.Equal(t, pid+"\n", string(joined), "the pid written to the group")
	assert.Equal(t, []string{pid, "zero", "one", "closed"}, strings.Fields(string(out)),
		"the program runs as the process that joined, with its arguments, without the group's descriptor")
}

// A command that cannot join runs nothing and exits 125, saying why.
func TestJoinCommandsFailsClosed(t *testing.T) {
	f, err := os.Open(filepath.Join(t.TempDir()))
	require.NoError(t, err)
	defer f.Close()
	withCommandsCgroup(t, f) // a directory: no write succeeds
	marker := filepath.Join(t.TempDir(), "ran")
	cmd := exec.Command("/bin/sh", "-c", `: > "$1"`, "sh", marker)
	joinCommands(cmd)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 125, exit.ExitCode())
	assert.Contains(t, string(out), "oma-sandbox: cannot join the session's process limit")
	assert.NoFileExists(t, marker, "the program ran outside the group")
}

// Without a group, a command is left as it was.
func TestJoinCommandsWithoutAGroup(t *testing.T) {
	cmd := exec.Command("/bin/true", "x")
	joinCommands(cmd)
	assert.Equal(t, "/bin/true", cmd.Path)
	assert.Equal(t, []string{"/bin/true", "x"}, cmd.Args)
	assert.Empty(t, cmd.ExtraFiles)
}

// A group descriptor among the standard three is refused before serving.
func TestServeRefusesAStandardDescriptorAsTheGroup(t *testing.T) {
	for _, fd := range []string{"1", "2", "-1"} {
		var stderr strings.Builder
		assert.Equal(t, 2, Main([]string{"serve", "--commands-cgroup-fd=" + fd}, strings.NewReader(""), io.Discard, &stderr), fd)
		assert.Contains(t, stderr.String(), "--commands-cgroup-fd="+fd+": want a descriptor number from 3")
		assert.Nil(t, commandsCgroup)
	}
}

// superviseTrue runs the bash builtin on a command that leaves a marker
// file, and returns its exit code and output.
func superviseTrue(t *testing.T, marker string) (int, string) {
	t.Helper()
	args, stdin := bashproto.Args(bashproto.NewCall(), `: > `+marker+`; echo "pid $$"`, time.Minute,
		bashproto.LogsIn(t.TempDir()), bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
	var out bytes.Buffer
	code, err := RunBuiltin(agentwire.BuiltinBashSupervisor, args, bytes.NewReader(stdin), &out, io.Discard)
	require.NoError(t, err)
	return code, out.String()
}

// The bash builtin's command is moved into the group before it is given
// its text; one that cannot be moved is killed having run nothing.
func TestBashCommandJoinsTheGroupBeforeItRuns(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	withCommandsCgroup(t, w)
	marker := filepath.Join(t.TempDir(), "ran")
	code, out := superviseTrue(t, marker)
	require.Equal(t, 0, code, out)
	w.Close()
	moved, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Contains(t, out, "pid "+string(moved)+"\n", "the process moved is not the command's")

	f, err := os.Open(t.TempDir())
	require.NoError(t, err)
	defer f.Close()
	withCommandsCgroup(t, f) // a directory: no write succeeds
	code, out = superviseTrue(t, marker+"-2")
	assert.Equal(t, 127, code, out)
	assert.Contains(t, out, "oma-sandbox: cannot run /bin/bash: cannot join the session's process limit")
	assert.NoFileExists(t, marker+"-2", "the command ran outside the group")
}
