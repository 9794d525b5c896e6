package local

import (
	"slices"
	"testing"
)

func TestBrokerArgv(t *testing.T) {
	got := brokerRunArgv(`C:\bin\broker.exe`, `C:\s\box`, `C:\s\box\workspace`, []string{"bash", "-c", "echo hi", "bash"})
	want := []string{`C:\bin\broker.exe`, "run", "--workspace-root", `C:\s\box`, "--working-directory", `C:\s\box\workspace`,
		"--network", "disabled", "--workspace-transfer", "controlled", "--cleanup", "always", "--", "bash", "-c", "echo hi", "bash"}
	if !slices.Equal(got, want) {
		t.Fatalf("run argv %q", got)
	}
	if got := brokerSelfTestArgv("broker"); !slices.Equal(got, []string{"broker", "self-test", "--network", "disabled", "--cleanup"}) {
		t.Fatalf("self-test argv %q", got)
	}
}
