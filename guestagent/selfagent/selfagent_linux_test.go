package selfagent

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
)

func TestMain(m *testing.M) { agenttest.Main(m) }

func TestIsStatic(t *testing.T) {
	static, err := isStatic(agenttest.AgentBinary(t))
	if err != nil || !static {
		t.Errorf("the agent (CGO_ENABLED=0): static %v, %v", static, err)
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skip(err)
	}
	if static, err := isStatic(sh); err != nil || static {
		t.Errorf("%s: static %v, %v; want a program that needs the dynamic loader", sh, static, err)
	}
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := isStatic(text); err == nil {
		t.Errorf("a script was read as an ELF file")
	}
}

func TestGuestNamesTheArchitecture(t *testing.T) {
	other := map[string]string{"amd64": "arm64"}[runtime.GOARCH]
	if other == "" {
		other = "amd64"
	}
	if ok, why := Guest(other); ok || !strings.Contains(why, "linux/"+other) {
		t.Errorf("Guest(%s) = %v, %q", other, ok, why)
	}
}
