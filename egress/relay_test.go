//go:build unix

package egress

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// TestRelay: the relay is listening before the command starts, forwards
// to the unix socket, and exits with the command's status (128+N for a
// signal); bad usage and a missing command are 126 and 127.
func TestRelay(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	testutil.UnixEcho(t, sock)
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	var stderr bytes.Buffer
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	// bash's /dev/tcp: the first connection the command makes must succeed.
	script := `exec 3<>/dev/tcp/127.0.0.1/` + port + ` && printf hello >&3 && read -r -t 5 line <&3; [ "$line" = echo:hello ] && exit 3; exit 9`
	if code := Relay([]string{sock, addr, "--", "bash", "-c", script}, &stderr); code != 3 {
		t.Errorf("relay of a command exiting 3 = %d (stderr %q)", code, stderr.String())
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{sock, "127.0.0.1:0", "--", "sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{sock, "127.0.0.1:0", "--", "/nonexistent/cmd"}, 127},
		{[]string{sock, "127.0.0.1:0", "sh"}, 126},
		{[]string{sock, "999.0.0.1:1", "--", "true"}, 126},
	} {
		start := time.Now()
		if got := Relay(c.args, io.Discard); got != c.want || time.Since(start) > 10*time.Second {
			t.Errorf("Relay(%q) = %d, want %d", c.args, got, c.want)
		}
	}
}
