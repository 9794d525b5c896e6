//go:build linux

package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/internal/confine"
)

// TestGuestCommandsRunConfined: guest root cannot regain capabilities in
// a new user namespace, open AF_VSOCK or mount, and lacks CAP_SYS_PTRACE
// (which would let it trace a launcher that has not yet loaded its
// filter), on a sandbox with and
// without the host's network; it holds no descriptor of a host file.
func TestGuestCommandsRunConfined(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "own", "-q", "--no-net")
	f.ok("create", "alpine", "-n", "host", "-q")
	script := `echo ran
unshare -U true 2>/dev/null; echo unshare=$?
unshare -Ur sh -c 'mount -t tmpfs none /tmp && echo mounted' 2>/dev/null
perl -e 'use Socket; print socket(my $s, 40, SOCK_STREAM, 0) ? "vsock=open\n" : "vsock=$!\n"'
echo ptrace=$(( 0x$(awk '/CapEff/ {print $2}' /proc/self/status) >> 19 & 1 ))
ls -l /proc/self/fd/ | grep -c fakemsb
grep Seccomp: /proc/self/status`
	for _, name := range []string{"own", "host"} {
		r := f.ok("exec", name, "--", "sh", "-c", script)
		assert.Equal(t, "ran\nunshare=1\nvsock=Operation not permitted\nptrace=0\n0\nSeccomp:\t2\n", r.stdout, name)
	}
}

// TestHostAbstractSocketsUnreachableFromGuests: a guest on the host's
// network cannot connect to the host's abstract unix sockets, while one
// it binds itself works.
func TestHostAbstractSocketsUnreachableFromGuests(t *testing.T) {
	name := "@fakemsb-test-" + strconv.Itoa(os.Getpid())
	ln, err := net.Listen("unix", name)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	f := newFx(t)
	f.ok("create", "alpine", "-n", "host", "-q")
	connect := func(abs string) string {
		return `perl -e 'use Socket; socket(my $s, PF_UNIX, SOCK_STREAM, 0) or die "socket: $!\n"; connect($s, pack_sockaddr_un("\0` + abs + `")) or die "connect: $!\n"; print "connected\n"'`
	}
	// The control: the host's socket is reachable from the host.
	out, err := exec.Command("sh", "-c", connect(name[1:])).CombinedOutput()
	require.NoError(t, err, "%s", out)
	r := f.run("exec", "host", "--", "sh", "-c", `echo ran; `+connect(name[1:])+` 2>&1
perl -e 'use Socket; socket(my $s, PF_UNIX, SOCK_STREAM, 0) or die; bind($s, pack_sockaddr_un("\0inner")) or die; listen($s, 1); sleep 5' &
sleep 0.3; `+connect("inner")+` 2>&1; kill $!`)
	if confine.LandlockABI() >= confine.ScopeABI {
		assert.Equal(t, "ran\nconnect: Operation not permitted\nconnected\n", r.stdout)
	} else {
		assert.Equal(t, "ran\nsocket: Operation not permitted\nsocket: Operation not permitted\n", r.stdout)
	}
}

// TestVolumeRemoveDeeperThanDescriptorLimit: a guest's directory chain
// deeper than fakemsb's descriptor limit is removed with its volume.
func TestVolumeRemoveDeeperThanDescriptorLimit(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit(1) not installed")
	}
	f := newFx(t)
	f.ok("create", "alpine", "-n", "a", "-q", "--mount-named", "v:/data")
	r := f.ok("exec", "a", "--", "sh", "-c", `cd /data && for i in $(seq 300); do mkdir d && cd d || exit 1; done && echo made`)
	require.Equal(t, "made\n", r.stdout)
	f.ok("remove", "--force", "-q", "a")
	cmd := f.cmd("volume", "remove", "-q", "v")
	cmd.Path, cmd.Args = prlimit, append([]string{prlimit, "--nofile=64:64", "--", fakemsbBin}, cmd.Args[1:]...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, err = os.Lstat(filepath.Join(f.home, "volumes", "v"))
	assert.True(t, os.IsNotExist(err), "volume directory left: %v", err)
	assert.NotContains(t, f.ok("volume", "list", "-q").stdout, "v\n")
}

// TestVolumeRemoveNeverFollowsGuestSymlinks: links a guest left in a
// volume, and directories exchanged with links while the volume is
// removed, never make the host touch the directory they name.
func TestVolumeRemoveNeverFollowsGuestSymlinks(t *testing.T) {
	const pairs = 40
	host := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(host, "keep"), []byte("host"), 0o640))
	require.NoError(t, os.Chmod(host, 0o751))
	f := newFx(t)
	for try := 0; try < 5; try++ {
		f.ok("create", "alpine", "-n", "a", "-q", "--mount-named", "v:/data")
		r := f.ok("exec", "a", "--", "sh", "-c", `cd /data && for i in $(seq `+strconv.Itoa(pairs)+`); do
mkdir -p p$i/dir/sub && ln -s `+host+` p$i/link && chmod 500 p$i/dir || exit 1; done
ln -s `+host+` top && chmod 0 p1 && echo planted`)
		require.Equal(t, "planted\n", r.stdout)
		f.ok("remove", "--force", "-q", "a")
		vol := filepath.Join(f.home, "volumes", "v")
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for i := 2; i <= pairs; i++ {
					d := filepath.Join(vol, "p"+strconv.Itoa(i))
					_ = unix.Renameat2(unix.AT_FDCWD, filepath.Join(d, "dir"), unix.AT_FDCWD, filepath.Join(d, "link"), unix.RENAME_EXCHANGE)
				}
			}
		}()
		r = f.run("volume", "remove", "-q", "v")
		stop.Store(true)
		wg.Wait()
		require.Equal(t, 0, r.code, "try %d: %s", try, r.stderr)
		fi, err := os.Stat(host)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o751), fi.Mode().Perm(), "try %d: host directory's mode changed", try)
		data, err := os.ReadFile(filepath.Join(host, "keep"))
		require.NoError(t, err)
		require.Equal(t, "host", string(data))
		ents, err := os.ReadDir(host)
		require.NoError(t, err)
		require.Len(t, ents, 1, "try %d: host directory changed", try)
	}
}
