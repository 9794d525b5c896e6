package realmsb

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TinyArchive writes a docker-style image archive, what `msb load` reads,
// under t.TempDir and returns its path: one layer holding /etc/motd, the
// guest image's user (65534), tagged tag. Loading it takes well under a
// second, and a create from it gets as far as booting the VM.
func TinyArchive(t testing.TB, tag string) string {
	t.Helper()
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	motd := []byte("oma-sandbox test image\n")
	check(t, lw.WriteHeader(&tar.Header{Name: "etc/", Mode: 0o755, Typeflag: tar.TypeDir}))
	check(t, lw.WriteHeader(&tar.Header{Name: "etc/motd", Mode: 0o644, Size: int64(len(motd))}))
	_, err := lw.Write(motd)
	check(t, err)
	check(t, lw.Close())
	layerSum := sha256.Sum256(layer.Bytes())
	config := fmt.Sprintf(`{"architecture":%q,"os":"linux","config":{"User":"65534:65534"},"rootfs":{"type":"layers","diff_ids":["sha256:%x"]}}`,
		runtime.GOARCH, layerSum)
	configSum := sha256.Sum256([]byte(config))
	manifest := fmt.Sprintf(`[{"Config":"%x.json","RepoTags":[%q],"Layers":["%x.tar"]}]`, configSum, tag, layerSum)

	path := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(path)
	check(t, err)
	defer f.Close()
	aw := tar.NewWriter(f)
	for _, entry := range []struct {
		name string
		data []byte
	}{
		{fmt.Sprintf("%x.tar", layerSum), layer.Bytes()},
		{fmt.Sprintf("%x.json", configSum), []byte(config)},
		{"manifest.json", []byte(manifest)},
	} {
		check(t, aw.WriteHeader(&tar.Header{Name: entry.name, Mode: 0o644, Size: int64(len(entry.data))}))
		_, err := aw.Write(entry.data)
		check(t, err)
	}
	check(t, aw.Close())
	check(t, f.Close())
	return path
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
