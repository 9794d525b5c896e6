package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/mcpserver"
)

// The bearer token comes from --token-file (written there when the file is
// new), else $OMA_MCP_TOKEN, else is generated; a weak or exposed one is a
// usage error.
func TestResolveToken(t *testing.T) {
	dir := t.TempDir()
	good := strings.Repeat("k", 40)
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	private := write("private", good+"\n", 0o600)
	open := write("open", good, 0o640)
	weak := write("weak", "abc\n", 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(dir, "fresh")
	long := write("long", strings.Repeat("k", 5000), 0o600)

	for _, tc := range []struct {
		file, env, token, source, err string
	}{
		{file: private, token: good, source: "read from " + private},
		{file: private, env: "ignored-when-a-file-is-given-xxxxxxxxxxxx", token: good, source: "read from " + private},
		{env: good, token: good, source: "from $OMA_MCP_TOKEN"},
		{source: "generated"},
		{file: fresh, source: "written to " + fresh},
		{file: open, err: "is open to other users (mode 0640); chmod 600 it"},
		{file: weak, err: "must be at least 32 characters"},
		{file: link, err: "is not a regular file"},
		{file: dir, err: "is a directory"},
		{file: long, err: "is longer than 4096 bytes"},
		{env: "short", err: "$OMA_MCP_TOKEN: the MCP bearer token must be at least 32 characters"},
	} {
		t.Setenv(tokenEnv, tc.env)
		e, err := resolveToken(tc.file)
		if tc.err != "" {
			if _, usage := err.(*usageError); !usage || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: got %v, want a usage error containing %q", tc, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tc, err)
			continue
		}
		if tc.token != "" && e.token != tc.token || e.source != tc.source || mcpserver.CheckToken(e.token) != nil {
			t.Errorf("%+v: got token %q source %q", tc, e.token, e.source)
		}
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("the new token file is written only once the server starts: %v", err)
	}
}

// announce writes a new token file readable by its owner only, and never
// replaces one that appeared meanwhile.
func TestAnnounceWritesTokenFile(t *testing.T) {
	ln, err := mcpserver.ListenHTTP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := filepath.Join(t.TempDir(), "token")
	e := &httpEndpoint{ln: ln, token: mcpserver.NewToken(), source: "written to " + p, writeFile: p}
	var out strings.Builder
	if err := e.announce(&out, "sess"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil || string(data) != e.token+"\n" {
		t.Fatalf("token file %q, %v", data, err)
	}
	if info, _ := os.Stat(p); info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", info.Mode())
	}
	if want := "oma-sandbox: serving session sess over MCP at " + mcpserver.URL(ln) + "\noma-sandbox: bearer token written to " + p + "\n"; out.String() != want {
		t.Errorf("announced %q, want %q", out.String(), want)
	}
	if err := e.announce(&out, "sess"); err == nil || !strings.Contains(err.Error(), "file exists") {
		t.Errorf("a second write: %v", err)
	}

	out.Reset()
	e = &httpEndpoint{ln: ln, token: mcpserver.NewToken(), source: "generated"}
	if err := e.announce(&out, "sess"); err != nil || !strings.HasSuffix(out.String(), "oma-sandbox: bearer token (send \"Authorization: Bearer TOKEN\"): "+e.token+"\n") {
		t.Errorf("generated: %q, %v", out.String(), err)
	}
}

// One message limit on every path: tool's stdin input and an MCP message.
func TestOneMessageLimit(t *testing.T) {
	if maxToolInput != mcpserver.MaxMessageBytes {
		t.Errorf("tool takes %d bytes of input, an MCP message %d", maxToolInput, mcpserver.MaxMessageBytes)
	}
}
