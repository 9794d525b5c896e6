//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/realmsb"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// refusedMemory is more guest memory than any host can map: msb records
// the sandbox, then fails to build its VM within a second, where a boot
// attempt on a host that cannot boot one takes 10 to 25 s. The record it
// leaves is Stopped, as after any failed start.
const refusedMemory = "1000000G"

// TestRealMSBHomeShared: with MSB_HOME set, oma-sandbox's session list,
// session create and reap and the user's own msb see the same sandboxes and
// volumes, with the real msb (no VM boots), and nothing goes to
// ~/.microsandbox. Not parallel: it sets the process environment.
func TestRealMSBHomeShared(t *testing.T) {
	env := realmsb.New(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("MSB_HOME", env.Home)
	t.Setenv("OMA_MSB", env.Bin)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	// The user's msb, in this process's environment.
	userMsb := func(args ...string) (stdout, stderr string, err error) {
		cmd := exec.Command(env.Bin, args...)
		cmd.Env = append(os.Environ(), "NO_COLOR=1")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	mustMsb := func(args ...string) string {
		t.Helper()
		stdout, stderr, err := userMsb(args...)
		if err != nil {
			t.Fatalf("msb %q: %v\n%s", args, err, stderr)
		}
		return stdout
	}
	oma := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code = Main(args, strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	const image = "oma-test/tiny:1"
	mustMsb("load", "--quiet", "--input", realmsb.TinyArchive(t, image))
	now := time.Now()
	left := session.NewNames("", "ws", "left", now, 1)
	orphan := session.NewNames("", "ws", "orphan", now, 2)
	owner := []string{}
	for _, l := range session.OwnerLabels() {
		owner = append(owner, "--label", l.Key+"="+l.Value)
	}
	// A session left behind: its volume, and its sandbox's record (a create
	// that fails to start leaves one). Then a volume of ours alone, and a
	// sandbox and a volume with the owner labels but names not of ours.
	mustMsb("volume", "create", "--name", left.Volume)
	create := append([]string{"create", image, "--name", left.Sandbox, "--pull", "never", "--quiet", "--memory", refusedMemory}, owner...)
	_, _, _ = userMsb(create...)
	mustMsb("volume", "create", "--name", orphan.Volume)
	mustMsb("volume", "create", "--name", "foreign-volume")
	create = append([]string{"create", image, "--name", "foreign-box", "--pull", "never", "--quiet", "--memory", refusedMemory}, owner...)
	_, _, _ = userMsb(create...)

	msbList, err := msb.ParseList([]byte(mustMsb("list", "--format", "json")))
	require.NoError(t, err)
	statuses := map[string]string{}
	for _, sb := range msbList {
		statuses[sb.Name] = sb.Status
	}
	require.Equal(t, map[string]string{left.Sandbox: "Stopped", "foreign-box": "Stopped"}, statuses, "msb list")

	// session list shows msb's sandboxes of ours, as msb lists them.
	code, stdout, stderr := oma("session", "list", "--backend", "msb", "--json")
	require.Equal(t, 0, code, stderr)
	var sessions []listed
	require.NoError(t, json.Unmarshal([]byte(stdout), &sessions), stdout)
	require.Len(t, sessions, 1, stdout)
	require.Equal(t, left.Sandbox, sessions[0].Name)
	require.Equal(t, statuses[left.Sandbox], sessions[0].Status)

	// A session create whose VM does not start: msb's whole diagnostic in
	// the error, and nothing of it left in msb's listings. (msb itself
	// keeps $MSB_HOME/sandboxes/NAME, which no msb command shows or
	// removes: docs/reaper.md.)
	code, _, stderr = oma("session", "create", "--backend", "msb", "--image", image, "--memory", refusedMemory,
		"--workspace-id", "ws", "--session-id", "failed")
	require.Equal(t, 1, code, stderr)
	for _, part := range []string{`failed to start "oma-ws-failed-`, "Cannot allocate memory", "msb logs --source system oma-ws-failed-"} {
		require.Contains(t, stderr, part)
	}
	require.NotContains(t, mustMsb("list", "--format", "json"), "oma-ws-failed-")
	require.NotContains(t, mustMsb("volume", "list", "--format", "json"), "oma-ws-failed-")

	// reap removes what is ours, as msb's listings show afterwards.
	code, stdout, stderr = oma("reap", "--older-than", "1ms", "--json")
	require.Equal(t, 0, code, stderr)
	var rep struct {
		RemovedSandboxes []string `json:"removed_sandboxes"`
		RemovedVolumes   []string `json:"removed_volumes"`
		Errors           []string `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.Equal(t, []string{left.Sandbox}, rep.RemovedSandboxes)
	require.ElementsMatch(t, []string{left.Volume, orphan.Volume}, rep.RemovedVolumes)
	require.Empty(t, rep.Errors)
	msbList, err = msb.ParseList([]byte(mustMsb("list", "--format", "json")))
	require.NoError(t, err)
	require.Len(t, msbList, 1)
	require.Equal(t, "foreign-box", msbList[0].Name)
	vols, err := msb.ParseVolumeList([]byte(mustMsb("volume", "list", "--format", "json")))
	require.NoError(t, err)
	require.Len(t, vols, 1)
	require.Equal(t, "foreign-volume", vols[0].Name)
	code, stdout, stderr = oma("session", "list", "--backend", "msb")
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stdout)

	_, err = os.Lstat(filepath.Join(home, ".microsandbox"))
	require.ErrorIs(t, err, os.ErrNotExist, "msb was run without MSB_HOME")
}
