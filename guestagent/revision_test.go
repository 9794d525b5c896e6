package guestagent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// revisionRecord holds the agent's revision and a digest of the sources
// it is built from, as last considered.
const revisionRecord = "testdata/revision"

// A change of the agent's sources must be weighed against its revision:
// a sandbox made by an older program receives the change only when the
// revision is raised (agentwire.Revision). This test stops any change of
// those sources until its digest is recorded, with the revision as it
// then is: OMA_RECORD_REVISION=1 go test ./guestagent -run TestRevisionFollowsTheAgent
func TestRevisionFollowsTheAgent(t *testing.T) {
	digest := agentSourcesDigest(t)
	got := fmt.Sprintf("%d %s\n", agentwire.Revision, digest)
	if os.Getenv("OMA_RECORD_REVISION") == "1" {
		if err := os.WriteFile(revisionRecord, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	recorded, err := os.ReadFile(revisionRecord)
	if err != nil {
		t.Fatal(err)
	}
	var rev int
	var was string
	if _, err := fmt.Sscanf(string(recorded), "%d %s\n", &rev, &was); err != nil {
		t.Fatalf("%s: %v", revisionRecord, err)
	}
	switch {
	case rev > agentwire.Revision:
		t.Fatalf("agentwire.Revision is %d, below the recorded %d: a revision is never lowered", agentwire.Revision, rev)
	case was != digest:
		t.Fatalf("the agent's sources changed since revision %d was recorded: if a sandbox made by an older program must receive "+
			"the change (a fix of a builtin), raise agentwire.Revision; then record it: OMA_RECORD_REVISION=1 go test ./guestagent -run TestRevisionFollowsTheAgent", rev)
	case rev != agentwire.Revision:
		t.Fatalf("agentwire.Revision is %d, the record %d: record it (OMA_RECORD_REVISION=1 go test ./guestagent -run TestRevisionFollowsTheAgent)", agentwire.Revision, rev)
	}
}

// agentSourcesDigest hashes the Go files, as built for Linux, of every
// package of this module the agent is built from.
func agentSourcesDigest(t *testing.T) string {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.Dir}}{{range .GoFiles}} {{.}}{{end}}", "github.com/oma-sandbox/oma-sandbox/cmd/oma-guest-agent")
	cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		rel, err := filepath.Rel(strings.TrimSpace(string(root)), fields[0])
		if err != nil || strings.HasPrefix(rel, "..") {
			continue // the standard library, or another module
		}
		for _, name := range fields[1:] {
			files = append(files, filepath.Join(rel, name))
		}
	}
	slices.Sort(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), f))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(f), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}
