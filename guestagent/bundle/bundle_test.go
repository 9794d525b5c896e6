package bundle

import (
	"bytes"
	"runtime"
	"testing"
)

func TestBinary(t *testing.T) {
	if _, ok := Binary("sparc"); ok {
		t.Fatal("a binary for an architecture nobody builds")
	}
	if _, ok := Binary("../bin/README.md"); ok {
		t.Fatal("Binary reached outside the binaries")
	}
	if Embedded("sparc") || Embedded("../bin/README.md") {
		t.Fatal("Embedded says yes to what Binary refuses")
	}
	for _, arch := range []string{"amd64", "arm64"} {
		b, ok := Binary(arch)
		if ok != Embedded(arch) {
			t.Fatalf("Binary(%s) says %v, Embedded says %v", arch, ok, !ok)
		}
		if !ok {
			t.Logf("no agent for %s in this build (make agent builds them)", arch)
			continue
		}
		if !bytes.HasPrefix(b, []byte("\x7fELF")) {
			t.Fatalf("the %s agent is not an ELF file", arch)
		}
	}
}

func TestGuestArch(t *testing.T) {
	want := map[string]string{"darwin": "arm64", "windows": "amd64"}[runtime.GOOS]
	if want == "" {
		want = runtime.GOARCH
	}
	if got := GuestArch(); got != want {
		t.Fatalf("GuestArch() = %s on %s, want %s", got, runtime.GOOS, want)
	}
}
