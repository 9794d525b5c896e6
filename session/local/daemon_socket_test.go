//go:build linux

package local

import (
	"net"
	"os"
	"strconv"
	"testing"
)

// TestHostDaemonSocketsAreUnreachable: a host daemon's socket under /run
// (a container runtime's, a desktop bus) is not in the sandbox, whatever
// its network mode; danger-full-access, which has the host's filesystem,
// reaches it (the control).
func TestHostDaemonSocketsAreUnreachable(t *testing.T) {
	if _, err := os.Stat("/run"); err != nil {
		t.Skip("no /run on this host")
	}
	path := "/run/oma-sandbox-test-" + strconv.Itoa(os.Getpid()) + ".sock"
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Skipf("cannot serve a socket under /run: %v", err)
	}
	defer ln.Close()
	// Open to every user, as a daemon serving anyone would be: only its
	// absence can stop the sandbox's unprivileged user.
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	connect := `echo ran; perl -e 'use Socket; socket(my $s, PF_UNIX, SOCK_STREAM, 0) or die "socket: $!\n"; connect($s, pack_sockaddr_un($ARGV[0])) or die "connect: $!\n"; print "connected\n"' "$1" 2>&1; true`
	for _, c := range []struct {
		pol  Policy
		want string
	}{
		{Policy{}, "ran\nconnect: No such file or directory\n"},
		{Policy{Network: NetworkUnrestricted}, "ran\nconnect: No such file or directory\n"},
		{Policy{Mode: ModeDangerFullAccess, AllowDangerous: true}, "ran\nconnected\n"},
	} {
		s := newTestSession(t, Options{Policy: c.pol})
		if got := string(sh(t, s, connect, path).Stdout); got != c.want {
			t.Errorf("%s/%s: %q, want %q", c.pol.Mode, c.pol.Network, got, c.want)
		}
	}
}
