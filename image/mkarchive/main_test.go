package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/internal/realmsb"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// rootfs returns a small root filesystem tar as mmdebstrap writes one.
func rootfs(t *testing.T) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range []struct {
		name, body string
		dir        bool
	}{{name: "./", dir: true}, {name: "./bin/", dir: true}, {name: "./bin/hello", body: "#!/bin/sh\necho hi\n"}, {name: "./workspace/", dir: true}} {
		hdr := &tar.Header{Name: e.name, Mode: 0o755, Typeflag: tar.TypeDir}
		if !e.dir {
			hdr = &tar.Header{Name: e.name, Mode: 0o755, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		}
		require.NoError(t, tw.WriteHeader(hdr))
		_, err := tw.Write([]byte(e.body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}

func build(t *testing.T, layer []byte) string {
	dir := t.TempDir()
	layerPath := filepath.Join(dir, "rootfs.tar")
	require.NoError(t, os.WriteFile(layerPath, layer, 0o644))
	out := filepath.Join(dir, "image.tar")
	require.NoError(t, run(layerPath, microvm.DefaultImage, "amd64", "2026-11-30T12:00:00Z", out))
	return out
}

// TestArchiveFormat reads the archive back as `msb load` does: the
// manifest names a config by its digest and the layer, whose digest is the
// config's diff_id.
func TestArchiveFormat(t *testing.T) {
	layer := rootfs(t)
	data, err := os.ReadFile(build(t, layer))
	require.NoError(t, err)
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		assert.False(t, strings.HasPrefix(hdr.Name, "/") || strings.Contains(hdr.Name, ".."), hdr.Name)
		if hdr.Typeflag == tar.TypeReg {
			files[hdr.Name], err = io.ReadAll(tr)
			require.NoError(t, err)
		}
	}
	var manifest []manifestEntry
	require.NoError(t, json.Unmarshal(files["manifest.json"], &manifest))
	require.Len(t, manifest, 1)
	m := manifest[0]
	assert.Equal(t, []string{microvm.DefaultImage}, m.RepoTags)
	require.Len(t, m.Layers, 1)
	assert.Equal(t, layer, files[m.Layers[0]], "the layer is the rootfs tar unchanged")

	cfgJSON := files[m.Config]
	sum := sha256.Sum256(cfgJSON)
	assert.Equal(t, hex.EncodeToString(sum[:])+".json", m.Config, "the config is named by its digest")
	var cfg imageConfig
	require.NoError(t, json.Unmarshal(cfgJSON, &cfg))
	layerSum := sha256.Sum256(layer)
	assert.Equal(t, []string{"sha256:" + hex.EncodeToString(layerSum[:])}, cfg.RootFS.DiffIDs)
	assert.Equal(t, "layers", cfg.RootFS.Type)
	assert.Equal(t, "amd64", cfg.Architecture)
	assert.Equal(t, "linux", cfg.OS)
	assert.Equal(t, "65534:65534", cfg.Config.User)
	assert.Equal(t, "/workspace", cfg.Config.WorkingDir)
	assert.Contains(t, cfg.Config.Env, "HOME=/workspace")
	assert.Contains(t, cfg.Config.Env, "PYTHONDONTWRITEBYTECODE=1")
	assert.Contains(t, cfg.Config.Env, "TMPDIR=/workspace")
	assert.Equal(t, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), cfg.Created)

	again, err := os.ReadFile(build(t, layer))
	require.NoError(t, err)
	assert.Equal(t, data, again, "the same layer and -created give the same archive")
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "image.tar")
	assert.ErrorContains(t, run("", "r", "amd64", "", out), "-layer, -ref and -o are required")
	assert.ErrorContains(t, run("x", "r", "riscv", "", out), `-arch "riscv"`)
	assert.ErrorContains(t, run("x", "r", "amd64", "yesterday", out), "-created")
	assert.ErrorContains(t, run(filepath.Join(dir, "missing.tar"), "r", "amd64", "", out), "missing.tar")
	_, err := os.Stat(out)
	assert.True(t, os.IsNotExist(err), "nothing written on a refusal")
}

// TestRealMsbLoads loads the archive into the real msb (no VM needed) and
// inspects it under the session's default reference.
func TestRealMsbLoads(t *testing.T) {
	env := realmsb.New(t)
	archive := build(t, rootfs(t))
	load := exec.Command(env.Bin, "load", "-q", "-t", microvm.DefaultImage, "-i", archive)
	load.Env = append(os.Environ(), env.Environ()...)
	out, err := load.CombinedOutput()
	require.NoError(t, err, "%s", out)
	inspect := exec.Command(env.Bin, "image", "inspect", microvm.DefaultImage, "--format", "json")
	inspect.Env = load.Env
	out, err = inspect.Output()
	require.NoError(t, err)
	var got struct {
		Reference string `json:"reference"`
		Config    struct {
			User       string   `json:"user"`
			WorkingDir string   `json:"working_dir"`
			Env        []string `json:"env"`
		} `json:"config"`
		LayerCount int `json:"layer_count"`
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	assert.Equal(t, microvm.DefaultImage, got.Reference)
	assert.Equal(t, "65534:65534", got.Config.User)
	assert.Equal(t, "/workspace", got.Config.WorkingDir)
	assert.Contains(t, got.Config.Env, "HOME=/workspace")
	assert.Equal(t, 1, got.LayerCount)
}
