package microvm_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

func createArgv(t *testing.T, env *fakemsbtest.Env) []string {
	t.Helper()
	for _, a := range argvs(t, env) {
		if a[0] == "create" {
			return a
		}
	}
	t.Fatal("no create")
	return nil
}

// A dev server the agent starts in the guest is reachable from the host
// through a preview port, on 127.0.0.1, although the session's network
// denies all: the forward gets an ingress rule for its guest port only.
func TestPreviewPort(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 serves the guest's page")
	}
	ctx := context.Background()
	env := fakemsbtest.New(t)
	port := testutil.FreePort(t)
	o := options(env)
	o.Ports = []msb.PortForward{{Host: port, Guest: 8000}}
	s := createSession(t, o)
	argv := strings.Join(createArgv(t, env), " ")
	assert.Contains(t, argv, fmt.Sprintf("--no-net --net-rule allow:ingress@any:tcp:8000"))
	assert.Contains(t, argv, fmt.Sprintf("--port 127.0.0.1:%d:8000", port))

	_, err := s.Shell(ctx, session.Command{Script: `echo preview >index.html && setsid -f python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 </dev/null`}, session.ShellOptions{})
	require.NoError(t, err)
	client := http.Client{Timeout: 3 * time.Second}
	var body []byte
	require.Eventually(t, func() bool {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", port))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(resp.Body)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, "preview\n", string(body))
}

// A host port already in use fails the create with msb's reason and
// leaves neither sandbox nor volume.
func TestPreviewPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	env := fakemsbtest.New(t)
	o := options(env)
	o.Ports = []msb.PortForward{{Host: l.Addr().(*net.TCPAddr).Port, Guest: 8000}}
	_, err = microvm.Create(context.Background(), o)
	require.ErrorIs(t, err, msb.ErrStartFailed)
	assert.Contains(t, err.Error(), "address already in use")
	assert.Empty(t, env.Sandboxes(t), "sandbox left behind")
	assert.Empty(t, env.Volumes(t), "volume left behind")
}

// Bad forwards are refused before any msb call, naming the bad value.
func TestPreviewPortRefusals(t *testing.T) {
	env := fakemsbtest.New(t)
	for _, c := range []struct {
		ports []msb.PortForward
		want  string
	}{
		{[]msb.PortForward{{Host: 0, Guest: 80}}, `host port "0"`},
		{[]msb.PortForward{{Host: 8080, Guest: 70000}}, `guest port "70000"`},
		{[]msb.PortForward{{Addr: "localhost", Host: 8080, Guest: 80}}, `port address "localhost"`},
		{[]msb.PortForward{{Host: 8080, Guest: 80}, {Host: 8080, Guest: 81}}, "forwarded twice"},
	} {
		o := options(env)
		o.Ports = c.ports
		_, err := microvm.Create(context.Background(), o)
		require.ErrorIs(t, err, session.ErrInvalid)
		assert.Contains(t, err.Error(), c.want)
	}
	assert.Empty(t, env.Invocations(t), "a refused create ran msb")
}

func resources(t *testing.T, env *fakemsbtest.Env, name string) (cpus, memoryMiB int) {
	t.Helper()
	info, err := msb.NewClient(&msb.CLI{Path: env.Bin}).Inspect(context.Background(), name)
	require.NoError(t, err)
	return info.CPUs, info.MemoryMiB
}

// Resize: live within what the VM booted with; beyond it msb's refusal
// (nothing changes) unless the caller allows a restart, after which the
// workspace is intact; a paused session takes it at its next start.
func TestResize(t *testing.T) {
	ctx := context.Background()
	env := fakemsbtest.New(t)
	o := options(env)
	o.CPUs, o.Memory = 2, "1G"
	s := createSession(t, o)
	name := s.Names().Sandbox
	_, err := s.Shell(ctx, session.Command{Script: `echo kept >note.txt`}, session.ShellOptions{})
	require.NoError(t, err)

	env.ResetLog(t)
	require.NoError(t, s.Resize(ctx, session.Resize{CPUs: 1, Memory: "512M"}))
	assert.Equal(t, [][]string{{"modify", name, "--cpus", "1", "--memory", "512M"}}, argvs(t, env))
	cpus, mem := resources(t, env, name)
	assert.Equal(t, [2]int{1, 512}, [2]int{cpus, mem})

	err = s.Resize(ctx, session.Resize{CPUs: 4})
	require.ErrorIs(t, err, msb.ErrRestartRequired)
	assert.Contains(t, err.Error(), "cpus requires restart: 1 -> 4")
	cpus, _ = resources(t, env, name)
	assert.Equal(t, 1, cpus, "a refused resize changed the sandbox")

	require.NoError(t, s.Resize(ctx, session.Resize{CPUs: 4, Restart: true}))
	cpus, _ = resources(t, env, name)
	assert.Equal(t, 4, cpus)
	res, err := s.Shell(ctx, session.Command{Script: `cat note.txt`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "kept\n", string(res.Stdout))

	require.NoError(t, s.Pause(ctx))
	require.NoError(t, s.Resize(ctx, session.Resize{Memory: "2G"}))
	assert.Equal(t, "Stopped", sandboxStatus(t, env, name), "a resize resumed a paused session")
	_, mem = resources(t, env, name)
	assert.Equal(t, 2048, mem)

	env.ResetLog(t)
	for _, r := range []session.Resize{{}, {CPUs: 300}, {Memory: "2Gi"}, {CPUs: 2, Restart: true, NextStart: true}} {
		require.ErrorIs(t, s.Resize(ctx, r), session.ErrInvalid, "%+v", r)
	}
	assert.Empty(t, argvs(t, env), "a refused resize ran msb")
}
