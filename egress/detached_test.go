//go:build linux

package egress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A detached proxy (this test binary run as DetachedName) enforces the
// policy it read on stdin, logs each refusal, and ends when the process it
// serves ends.
func TestServeDetached(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "proxy.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	lf, err := l.(*net.UnixListener).File()
	require.NoError(t, err)
	l.Close()
	defer lf.Close()
	log, err := os.OpenFile(filepath.Join(dir, "refusals"), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer log.Close()
	served := exec.Command("sleep", "30")
	require.NoError(t, served.Start())
	t.Cleanup(func() { _ = served.Process.Kill(); _ = served.Wait() })
	pidfd, err := unix.PidfdOpen(served.Process.Pid, 0)
	require.NoError(t, err)
	watch := os.NewFile(uintptr(pidfd), "pidfd")
	defer watch.Close()

	target, err := ParseTarget("allowed.test")
	require.NoError(t, err)
	cfg, err := json.Marshal(DetachedConfig{Policy: Policy{Mode: Allowlist, Allow: []Target{target}}})
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	proxy := &exec.Cmd{Path: exe, Args: []string{DetachedName}, Stdin: bytes.NewReader(cfg), ExtraFiles: []*os.File{lf, log, watch}}
	var stderr bytes.Buffer
	proxy.Stderr = &stderr
	require.NoError(t, proxy.Start())
	exited := make(chan error, 1)
	go func() { exited <- proxy.Wait() }()

	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	fmt.Fprintf(c, "CONNECT refused.test:443 HTTP/1.1\r\nHost: refused.test:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	c.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	refusals, next, err := ReadRefusals(log, 0)
	require.NoError(t, err)
	assert.Equal(t, []RefusedError{{Dest: "refused.test:443", Kind: NotAllowed, Reason: "not in the allowlist"}}, refusals)
	assert.Equal(t, LogSize(log), next)

	select {
	case err := <-exited:
		t.Fatalf("the proxy ended while its process runs: %v (%s)", err, stderr.String())
	default:
	}
	require.NoError(t, served.Process.Kill())
	select {
	case err := <-exited:
		require.NoError(t, err, "stderr %s", stderr.String())
	case <-time.After(10 * time.Second):
		_ = proxy.Process.Kill()
		t.Fatal("the proxy outlived the process it serves")
	}
}

// Bad input: arguments, or a configuration that is no JSON or no valid
// policy, ends the proxy at once with why.
func TestServeDetachedRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"x"}, `{}`, `unexpected argument "x"`},
		{nil, `nope`, "configuration: invalid character"},
		{nil, `{"policy":{"mode":"allowlist"}}`, "allowlist"},
	} {
		var stderr bytes.Buffer
		assert.Equal(t, 1, ServeDetached(tc.args, strings.NewReader(tc.stdin), &stderr))
		assert.Contains(t, stderr.String(), tc.want)
	}
}

// ReadRefusals reads whole lines from an offset on, leaves a line not yet
// ended for the next read, and reads a log that started again from its
// start.
func TestReadRefusals(t *testing.T) {
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "refusals"), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer f.Close()
	r := &refusalLog{f: f}
	r.add(&RefusedError{Dest: "a:1", Kind: NotAllowed, Reason: "one"})
	mid := LogSize(f)
	r.add(&RefusedError{Dest: "b:2", Kind: InvalidDest, Reason: "two"})
	_, err = f.WriteString(`{"dest":"c:3"`) // a write under way
	require.NoError(t, err)
	got, next, err := ReadRefusals(f, mid)
	require.NoError(t, err)
	assert.Equal(t, []RefusedError{{Dest: "b:2", Kind: InvalidDest, Reason: "two"}}, got)
	_, err = f.WriteString(`,"reason":"three"}` + "\n")
	require.NoError(t, err)
	got, _, err = ReadRefusals(f, next)
	require.NoError(t, err)
	assert.Equal(t, []RefusedError{{Dest: "c:3", Reason: "three"}}, got)

	// Past MaxRefusalLog the log starts again; a reader beyond its end
	// reads it from the start.
	r.written = MaxRefusalLog
	r.add(&RefusedError{Dest: "d:4", Reason: "four"})
	got, _, err = ReadRefusals(f, next)
	require.NoError(t, err)
	assert.Equal(t, []RefusedError{{Dest: "d:4", Reason: "four"}}, got)
}

// A configuration keeps each secret's placeholder and value on its way to
// the proxy.
func TestDetachedConfigRoundTrip(t *testing.T) {
	sec, err := ParseSecret("TOKEN@api.test,*.other.test")
	require.NoError(t, err)
	target, err := ParseTarget("api.test")
	require.NoError(t, err)
	in := DetachedConfig{Policy: Policy{Mode: Allowlist, Allow: []Target{target}, Secrets: []Secret{sec}},
		Secrets: []SecretValue{{Secret: sec, Placeholder: "oma-secret-TOKEN-0123", Value: "v4lue"}}}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	var out DetachedConfig
	require.NoError(t, json.Unmarshal(b, &out))
	assert.Equal(t, in, out)
}
