// Command mkarchive wraps a root filesystem tar into the docker-style image
// archive that `msb load` reads: manifest.json, the image config (named by
// its sha256) and the tar as the image's only layer. The config is the one
// image/Dockerfile describes: the agent runs as 65534:65534 with HOME and
// TMPDIR in /workspace. scripts/build-image.sh runs it.
//
//	mkarchive -layer rootfs.tar -ref REF -arch amd64 -created RFC3339 -o image.tar
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	layer := flag.String("layer", "", "the root filesystem `tar` (required)")
	ref := flag.String("ref", "", "the image `reference` to tag, e.g. ghcr.io/oma-sandbox/sandbox:latest (required)")
	arch := flag.String("arch", "amd64", "the image's OCI `architecture`: amd64 or arm64")
	created := flag.String("created", "", "the image's creation `time`, RFC 3339 (default now; set it for reproducible archives)")
	out := flag.String("o", "", "the archive to write (required)")
	flag.Parse()
	if err := run(*layer, *ref, *arch, *created, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkarchive:", err)
		os.Exit(1)
	}
}

func run(layerPath, ref, arch, created, outPath string) error {
	switch {
	case layerPath == "" || ref == "" || outPath == "":
		return errors.New("-layer, -ref and -o are required")
	case arch != "amd64" && arch != "arm64":
		return fmt.Errorf("-arch %q: want amd64 or arm64", arch)
	}
	when := time.Now().UTC()
	if created != "" {
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			return fmt.Errorf("-created: %w", err)
		}
		when = t.UTC()
	}
	layer, err := os.Open(layerPath)
	if err != nil {
		return err
	}
	defer layer.Close()
	tmp := outPath + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := writeArchive(f, layer, ref, arch, when); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, outPath)
}

// imageConfig is the subset of the OCI image config msb reads.
type imageConfig struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Created      time.Time `json:"created"`
	Config       struct {
		User       string   `json:"User"`
		Env        []string `json:"Env"`
		WorkingDir string   `json:"WorkingDir"`
		Cmd        []string `json:"Cmd"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []historyEntry `json:"history"`
}

type historyEntry struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
}

type manifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// writeArchive writes the archive for the uncompressed layer tar in layer,
// which it reads twice (to hash it, then to copy it).
func writeArchive(w io.Writer, layer io.ReadSeeker, ref, arch string, created time.Time) error {
	h := sha256.New()
	size, err := io.Copy(h, layer)
	if err != nil {
		return fmt.Errorf("read layer: %w", err)
	}
	if _, err := layer.Seek(0, io.SeekStart); err != nil {
		return err
	}
	diffID := hex.EncodeToString(h.Sum(nil))

	var cfg imageConfig
	cfg.Architecture, cfg.OS, cfg.Created = arch, "linux", created
	cfg.Config.User = "65534:65534"
	cfg.Config.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/workspace",
		"TMPDIR=/workspace",
		// No __pycache__ in the workspace: a stale one can hide an edit made
		// in the same second with the same size.
		"PYTHONDONTWRITEBYTECODE=1",
	}
	cfg.Config.WorkingDir = "/workspace"
	cfg.Config.Cmd = []string{"bash"}
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{"sha256:" + diffID}
	cfg.History = []historyEntry{{created, "scripts/build-image.sh (mmdebstrap)"}}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgSum := sha256.Sum256(cfgJSON)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	layerName := diffID + "/layer.tar"
	manifest, err := json.Marshal([]manifestEntry{{Config: cfgName, RepoTags: []string{ref}, Layers: []string{layerName}}})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	file := func(name string, size int64, body io.Reader) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.Copy(tw, body)
		if err == nil && n != size {
			err = fmt.Errorf("%s changed while it was written: %d bytes, want %d", name, n, size)
		}
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: diffID + "/", Mode: 0o755, ModTime: created, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if err := file(layerName, size, layer); err != nil {
		return err
	}
	if err := file(cfgName, int64(len(cfgJSON)), bytes.NewReader(cfgJSON)); err != nil {
		return err
	}
	if err := file("manifest.json", int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return err
	}
	return tw.Close()
}
