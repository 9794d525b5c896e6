package omasandbox_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// scenario runs every typed method and its Call twin on s and returns the
// texts, so two backends can be compared.
func scenario(t *testing.T, s *omasandbox.Session) []string {
	t.Helper()
	ctx := context.Background()
	var texts []string
	call := func(name, input string) string {
		text, err := s.Call(ctx, name, json.RawMessage(input))
		require.NoError(t, err, name)
		return text
	}
	require.NoError(t, s.Write(ctx, "src/main.go", []byte("package main // TODO\n")))
	require.NoError(t, s.Edit(ctx, "src/main.go", omasandbox.Edit{Old: "TODO", New: "done"}))
	text, err := s.Read(ctx, "src/main.go", omasandbox.ReadOptions{})
	require.NoError(t, err)
	assert.Equal(t, "package main // done\n", text)
	assert.Equal(t, call("read", `{"path":"src/main.go"}`), text, "Read and Call read one text")
	texts = append(texts, text)

	paths, err := s.Glob(ctx, "**/*.go")
	require.NoError(t, err)
	assert.Equal(t, []string{"src/main.go"}, paths)
	texts = append(texts, call("glob", `{"pattern":"**/*.go"}`))

	paths, err = s.Grep(ctx, "done")
	require.NoError(t, err)
	assert.Equal(t, []string{s.Paths().Workspace + "/src/main.go"}, paths)

	ls, err := s.Ls(ctx, "src")
	require.NoError(t, err)
	assert.Equal(t, call("ls", `{"path":"src"}`), ls)
	texts = append(texts, ls)

	var streamed []byte
	res, err := s.Bash(ctx, "echo hi; exit 4", omasandbox.BashOptions{Timeout: 5 * time.Second, Progress: func(p []byte) { streamed = append(streamed, p...) }})
	require.NoError(t, err, "a non-zero exit is a result, not an error")
	assert.Equal(t, 4, res.ExitCode)
	assert.Equal(t, "hi\n", string(streamed))
	_, callErr := s.Call(ctx, "bash", json.RawMessage(`{"command":"echo hi; exit 4","timeout":5}`))
	var cmdErr *omasandbox.CommandError
	require.ErrorAs(t, callErr, &cmdErr)
	assert.Equal(t, cmdErr.Text, res.Text, "Bash and Call bash one text")
	texts = append(texts, res.Text)

	res, err = s.Bash(ctx, "sleep 30", omasandbox.BashOptions{Timeout: time.Second})
	require.ErrorIs(t, err, omasandbox.ErrGuestTimeout)
	assert.True(t, res.TimedOut)

	require.NoError(t, s.Upload(ctx, omasandbox.UploadFile{Path: "in/a.txt", Content: []byte("up\n")}))
	_, err = s.Bash(ctx, "cp "+s.Paths().Uploads+"/in/a.txt "+s.Paths().Outputs+"/b.txt", omasandbox.BashOptions{})
	require.NoError(t, err)
	dest := t.TempDir()
	got, err := s.CollectOutputs(ctx, dest)
	require.NoError(t, err)
	require.Len(t, got.Files, 1)
	data, err := os.ReadFile(filepath.Join(dest, "b.txt"))
	require.NoError(t, err)
	assert.Equal(t, "up\n", string(data))
	return texts
}

func openLocal(t *testing.T) *omasandbox.Session {
	t.Helper()
	if reason := localMissing(); reason != "" {
		t.Skip(reason)
	}
	s, err := omasandbox.Open(context.Background(), omasandbox.Options{Backend: "local", WorkspaceID: "w1", StateDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close(context.Background())) })
	return s
}

// TestSameOnFakemsbAndLocal runs the scenario on msb (played by fakemsb)
// and on the local backend: the same calls give the same texts.
func TestSameOnFakemsbAndLocal(t *testing.T) {
	env := fakemsbtest.New(t)
	ctx := context.Background()
	ms, err := omasandbox.Open(ctx, omasandbox.Options{Backend: "auto", Msb: env.Bin, WorkspaceID: "w1", SessionID: "s1"})
	require.NoError(t, err)
	assert.Equal(t, "msb", ms.Backend(), "auto picks msb when its doctor passes and the image is cached")
	msbTexts := scenario(t, ms)
	attached, err := omasandbox.Attach(ctx, ms.Name(), omasandbox.Options{Msb: env.Bin})
	require.NoError(t, err)
	text, err := attached.Read(ctx, "src/main.go", omasandbox.ReadOptions{})
	require.NoError(t, err)
	assert.Equal(t, "package main // done\n", text)
	require.NoError(t, ms.Close(ctx))
	assert.Empty(t, env.Sandboxes(t), "Close leaves no sandbox")
	assert.Empty(t, env.Volumes(t), "Close leaves no volume")
	_, err = attached.Read(ctx, "src/main.go", omasandbox.ReadOptions{})
	assert.ErrorIs(t, err, omasandbox.ErrNotFound, "a session removed elsewhere is gone for its other handles")

	assert.Equal(t, msbTexts, scenario(t, openLocal(t)))
}

func TestOpenRefusesBadOptions(t *testing.T) {
	ctx := context.Background()
	stateDir := t.TempDir()
	for name, o := range map[string]omasandbox.Options{
		"backend":   {Backend: "docker", WorkspaceID: "w1"},
		"workspace": {Backend: "local"},
		"cpus":      {Backend: "local", WorkspaceID: "w1", CPUs: -1},
		"idle":      {Backend: "local", WorkspaceID: "w1", IdleTimeout: "5m"},
		"ports":     {Backend: "local", WorkspaceID: "w1", Ports: []omasandbox.PortForward{{Host: 8080, Guest: 80}}},
	} {
		o.StateDir = stateDir
		_, err := omasandbox.Open(ctx, o)
		assert.ErrorIs(t, err, omasandbox.ErrInvalid, name)
		if want := map[string]string{"idle": `idle timeout "5m": msb sessions only`, "ports": "port 127.0.0.1:8080:80: msb sessions only"}[name]; want != "" {
			assert.ErrorContains(t, err, want)
		}
	}
	entries, err := os.ReadDir(stateDir)
	require.NoError(t, err)
	assert.Empty(t, entries, "a refused option creates nothing")

	_, err = omasandbox.Attach(ctx, "not-a-session", omasandbox.Options{StateDir: stateDir})
	assert.ErrorIs(t, err, omasandbox.ErrInvalid)
	_, err = omasandbox.Attach(ctx, "oma-local-w1-s1-0000000-abcdef", omasandbox.Options{StateDir: stateDir})
	assert.Error(t, err)
}

func TestTypedInputErrors(t *testing.T) {
	s := openLocal(t)
	ctx := context.Background()
	err := s.Write(ctx, "bin", []byte{0xff, 0xfe})
	assert.ErrorIs(t, err, omasandbox.ErrInvalidInput, "bytes that are not UTF-8 are refused, not mangled")
	_, err = s.Read(ctx, "../../etc/passwd", omasandbox.ReadOptions{})
	assert.ErrorIs(t, err, omasandbox.ErrOutsideWorkspace)
	_, err = s.Bash(ctx, "ln -s /etc/hostname out", omasandbox.BashOptions{})
	require.NoError(t, err)
	err = s.Write(ctx, "out", []byte("x"))
	assert.ErrorIs(t, err, omasandbox.ErrOutsideWorkspace, "a link out of the workspace is refused as outside it")
	err = s.Edit(ctx, "out", omasandbox.Edit{Old: "a", New: "b"})
	assert.ErrorIs(t, err, omasandbox.ErrOutsideWorkspace)
	_, err = s.Read(ctx, "missing.txt", omasandbox.ReadOptions{})
	var guestErr *omasandbox.GuestError
	assert.ErrorAs(t, err, &guestErr)
	_, err = s.Call(ctx, "rm", json.RawMessage(`{}`))
	assert.ErrorIs(t, err, omasandbox.ErrUnknownTool)
	err = s.Upload(ctx, omasandbox.UploadFile{Path: "../escape", Content: []byte("x")})
	assert.ErrorIs(t, err, omasandbox.ErrUnsafePath)
	err = s.Upload(ctx, omasandbox.UploadFile{Path: "/etc/x", Content: []byte("x")})
	assert.ErrorIs(t, err, omasandbox.ErrUnsafePath, "an absolute upload path is refused, not moved below the root")
	require.NoError(t, s.Close(ctx))
	_, err = s.Read(ctx, "x", omasandbox.ReadOptions{})
	assert.Error(t, err, "a closed session runs nothing")
}

func TestDefinitionsMatchCall(t *testing.T) {
	var names []string
	for _, d := range omasandbox.Definitions() {
		names = append(names, d.Name)
		assert.True(t, json.Valid(d.InputSchema), d.Name)
	}
	assert.Equal(t, []string{"bash", "edit", "glob", "grep", "ls", "read", "write"}, names)
}
