package omasandbox

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/oma-sandbox/oma-sandbox/msb"
)

func TestVersionCheck(t *testing.T) {
	for out, want := range map[string]string{
		"msb 0.6.7\n":      "ok",
		"msb 0.6.18\n":     "ok",
		"msb 0.6.6\n":      "warn",
		"msb 0.6.19\n":     "warn",
		"msb 0.7.0\n":      "warn",
		"msb 0.6.18-rc1\n": "warn",
		"msb 1.0\n":        "warn",
		"microsandbox 1\n": "fail",
		"":                 "fail",
	} {
		got := versionCheck(&msb.Result{Stdout: []byte(out)}, nil)
		assert.Equal(t, want, got.Status, "%q: %s", out, got.Detail)
	}
	assert.Equal(t, "fail", versionCheck(nil, errors.New("exec: boom")).Status)
}

func TestImageCheck(t *testing.T) {
	notFound := errors.New("msb image inspect: exit 1: image not found: x")
	assert.Equal(t, "ok", imageCheck("x", false, nil).Status)
	assert.Equal(t, "fail", imageCheck("x", false, notFound).Status, "the default image cannot be pulled")
	assert.Equal(t, "warn", imageCheck("x", true, notFound).Status, "a named image may be pulled")
	assert.Equal(t, "fail", imageCheck("x", true, errors.New("msb image inspect: exit 1: database locked")).Status)

	until := time.Now().Add(20 * time.Minute).UTC()
	lease := fmt.Errorf("probe: %w", &msb.ExitError{Args: []string{"image", "inspect", "x"}, ExitCode: 1, Kind: msb.ErrInstallInProgress, RetryAt: until})
	c := imageCheck("x", true, lease)
	assert.Equal(t, "msb state", c.Name, "the lease is msb's, not the image's")
	assert.Equal(t, "fail", c.Status)
	assert.Contains(t, c.Detail, "refuses every command until "+until.Format(time.RFC3339))
}

func TestLocalAgentCheck(t *testing.T) {
	elf := func(string) ([]byte, bool) { return make([]byte, 4096), true }
	none := func(string) ([]byte, bool) { return nil, false }
	for _, c := range []struct {
		goos    string
		root    bool
		bundled func(string) ([]byte, bool)
		want    Check
	}{
		{"linux", true, elf, okCheck("guest agent", "bundled for linux/amd64 (4 KiB): a session's calls, from every process, run in its resident sandbox")},
		{"linux", false, elf, okCheck("guest agent", "bundled for linux/amd64 (4 KiB): a session's calls, from every process, run in its resident sandbox, its commands in a pid namespace apart from the agent")},
		{"linux", false, none, okCheck("guest agent", "not bundled for linux/amd64 (built without make agent): this program serves as the agent; a session's calls, from every process, run in its resident sandbox, its commands in a pid namespace apart from the agent (where this program was built without cgo; else each call runs in a sandbox of its own)")},
		{"linux", true, none, okCheck("guest agent", "not bundled for linux/amd64 (built without make agent): this program serves as the agent; a session's calls, from every process, run in its resident sandbox")},
		{"darwin", true, elf, failCheck("guest agent", "serves Linux only, and it runs every tool call: no local session runs on darwin")},
	} {
		assert.Equal(t, c.want, localAgentCheck(c.goos, "amd64", c.root, c.bundled), c.goos)
	}
}

func TestMsbAgentCheck(t *testing.T) {
	elf := func(string) ([]byte, bool) { return make([]byte, 4096), true }
	none := func(string) ([]byte, bool) { return nil, false }
	static := func(string) (bool, string) { return true, "" }
	cgo := func(string) (bool, string) { return false, "linked with the C library" }
	assert.Equal(t, okCheck("guest agent", "bundled for linux/amd64 (4 KiB): calls travel over one channel per session"),
		msbAgentCheck("amd64", elf, cgo))
	assert.Equal(t, okCheck("guest agent", "not bundled for linux/amd64 (built without make agent): this program, a static build, serves as the agent in the guest; calls travel over one channel per session"),
		msbAgentCheck("amd64", none, static))
	got := msbAgentCheck("amd64", none, cgo)
	assert.Equal(t, "fail", got.Status, "msb is not usable")
	assert.Contains(t, got.Detail, "(linked with the C library)")
	assert.Contains(t, got.Detail, "CGO_ENABLED=0")
}
