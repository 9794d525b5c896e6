package local

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/session"
)

func TestSeatbeltProfile(t *testing.T) {
	spec := seatbeltSpec{Mode: ModeWorkspaceWrite, Network: NetworkDeny,
		Workspace: "/private/var/s/box/workspace", Uploads: "/private/var/s/box/uploads", Outputs: "/private/var/s/box/outputs",
		Env: []string{"HOME=/private/var/s/box/workspace", "PATH=/usr/bin:/bin"}, Command: []string{"/bin/sh", "-c", "true"}}
	got, err := spec.profile()
	if err != nil {
		t.Fatal(err)
	}
	want := `(version 1)
(deny default)
(import "system.sb")
(allow process-exec)
(allow process-fork)
(allow signal (target same-sandbox))
(allow sysctl-read)
(allow mach-lookup)
(allow file-read-metadata)
(deny network*)
(allow file-read* (subpath "/System"))
(allow file-read* (subpath "/usr"))
(allow file-read* (subpath "/bin"))
(allow file-read* (subpath "/sbin"))
(allow file-read* (subpath "/Library"))
(allow file-read* (subpath "/private/etc"))
(allow file-read* (subpath "/private/var/db/timezone"))
(allow file-read* (subpath "/opt/homebrew"))
(allow file-read* file-write-data (literal "/dev/null") (literal "/dev/zero"))
(allow file-read* (literal "/dev/urandom") (literal "/dev/random"))
(allow file-read* (subpath "/private/var/s/box/workspace") (subpath "/private/var/s/box/uploads") (subpath "/private/var/s/box/outputs"))
(allow file-write* (subpath "/private/var/s/box/workspace") (subpath "/private/var/s/box/outputs"))`
	if got != want {
		t.Fatalf("profile\n%s\nwant\n%s", got, want)
	}
	argv, err := spec.argv("/usr/bin/sandbox-exec")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(argv, []string{"/usr/bin/sandbox-exec", "-p", want, "/usr/bin/env", "-i",
		"HOME=/private/var/s/box/workspace", "PATH=/usr/bin:/bin", "/bin/sh", "-c", "true"}) {
		t.Fatalf("argv %q", argv)
	}

	ro := spec
	ro.Mode = ModeReadOnly
	if p, _ := ro.profile(); strings.Contains(p, "file-write* (subpath") {
		t.Fatalf("read-only profile allows writes:\n%s", p)
	}
	open := spec
	open.Network = NetworkUnrestricted
	if p, _ := open.profile(); !strings.Contains(p, "(allow network*)") || strings.Contains(p, "(deny network*)") {
		t.Fatalf("unrestricted profile:\n%s", p)
	}
	root := ro
	root.Root = true
	if p, _ := root.profile(); !strings.Contains(p, `(allow file-write* (subpath "/private/var/s/box/workspace") (subpath "/private/var/s/box/uploads") (subpath "/private/var/s/box/outputs"))`) {
		t.Fatalf("root profile:\n%s", p)
	}
	danger := spec
	danger.Mode = ModeDangerFullAccess
	if p, _ := danger.profile(); p != "(version 1)\n(allow default)" {
		t.Fatalf("danger profile:\n%s", p)
	}
	for _, bad := range []string{`/a"b`, `/a\b`, "relative", "/a\nb"} {
		b := spec
		b.Outputs = bad
		if _, err := b.profile(); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("path %q accepted: %v", bad, err)
		}
	}
	b := spec
	b.Command = []string{"A=B", "x"}
	if _, err := b.argv("sandbox-exec"); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("command with '=' accepted: %v", err)
	}
}
