//go:build linux

package guestagent

import (
	"bytes"
	"context"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
)

// A timeout too long for the timer (seconds beyond time.Duration's range)
// is a malformed request, not a timer that wraps negative and kills the
// command at once.
func TestSupervisorRefusesOverlongTimeout(t *testing.T) {
	args, stdin := bashproto.Args(bashproto.NewCall(), "echo ran", time.Minute, bashproto.LogsIn(t.TempDir()), bashproto.Limits{MaxLines: 2000, MaxBytes: 50 << 10})
	for _, secs := range []int64{1 << 40, 1<<63 - 1} {
		args[1] = strconv.FormatInt(secs, 10)
		var out, errb bytes.Buffer
		code, err := RunBuiltin(agentwire.BuiltinBashSupervisor, args, bytes.NewReader(stdin), &out, &errb)
		require.NoError(t, err)
		assert.Equal(t, exitMalformedRequest, code, "secs %d: out %q", secs, out.String())
		assert.NotContains(t, out.String(), ":timeout:", "secs %d", secs)
	}
}

// A byte limit at the top of int64's range must not wrap: the read
// answers, it does not panic (which would end the agent and every call).
func TestReadHugeByteLimit(t *testing.T) {
	f := t.TempDir() + "/f"
	require.NoError(t, os.WriteFile(f, []byte("one\ntwo\n"), 0o644))
	var out, errb bytes.Buffer
	var code int
	require.NotPanics(t, func() {
		code, _ = RunBuiltin(agentwire.BuiltinRead, []string{f, "1", "2000", strconv.FormatInt(math.MaxInt64, 10), "f", "END"}, eofReader{}, &out, &errb)
	})
	assert.Equal(t, 0, code, errb.String())
	assert.Equal(t, "T 3 3\none\ntwo\nEND", out.String())
}

// ls of a symbolic link to a directory lists the directory, as the seed's
// `ls -1A PATH` (and pi's stat then readdir) does: the tool checked with
// stat that it is a directory, so it must not answer "(empty directory)".
func TestLsBuiltinFollowsALinkToADirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(dir+"/d", 0o755))
	require.NoError(t, os.WriteFile(dir+"/d/f", []byte("x"), 0o644))
	require.NoError(t, os.Symlink("d", dir+"/link"))
	var out, errb bytes.Buffer
	code, err := RunBuiltin(agentwire.BuiltinLs, []string{dir + "/link", "link"}, eofReader{}, &out, &errb)
	require.NoError(t, err)
	assert.Equal(t, 0, code, errb.String())
	assert.Equal(t, "f f\x00", out.String())
}

// flakyListener fails its first Accept as accept4 does when the agent is
// out of descriptors for a moment.
type flakyListener struct {
	net.Listener
	failed bool
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed {
		l.failed = true
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// Running out of descriptors for a moment (calls in flight on every
// channel) must not end the resident agent, and its sandbox with it: the
// next connection is still served.
func TestServeConnsOutlivesATransientAcceptError(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "agent.sock"))
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() {
		served <- ServeConns(&flakyListener{Listener: ln}, 2, io.Discard, func(rw io.ReadWriter) *Server {
			return &Server{In: rw, Out: rw, Etc: "/etc", Shell: "/bin/bash", DefaultWorkdir: dir}
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := net.Dial("unix", filepath.Join(dir, "agent.sock"))
	require.NoError(t, err)
	defer c.Close()
	conn, err := agentchan.Open(ctx, c, c)
	if err != nil {
		select {
		case serr := <-served:
			t.Fatalf("ServeConns returned %v: the agent stopped serving", serr)
		default:
			t.Fatalf("opening a channel: %v", err)
		}
	}
	res, err := conn.Run(ctx, agentchan.Request{Script: "echo served"}, agentchan.Output{})
	require.NoError(t, err)
	assert.Equal(t, "served\n", string(res.Stdout))
	conn.Close()
	ln.Close()
	assert.NoError(t, <-served)
}

// heapAtWrites records the live heap at each write it is given.
type heapAtWrites struct{ peak uint64 }

func (h *heapAtWrites) Write(b []byte) (int, error) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.peak = max(h.peak, m.HeapAlloc)
	return len(b), nil
}

// A glob walk down a deep tree (which a command builds with a loop of
// mkdir and cd) holds memory in proportion to the depth, not to its
// square: every directory's path alive at once would take a tree of
// 30,000 levels to nearly a gigabyte, past the sandbox's memory.
func TestGlobEnumerateDeepTreeMemory(t *testing.T) {
	root := t.TempDir()
	name := strings.Repeat("n", 200)
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	const depth = 400 // a path of 80 KB: past the walk's 64 KiB output buffer
	for range depth {
		require.NoError(t, unix.Mkdirat(fd, name, 0o755))
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		require.NoError(t, err)
		unix.Close(fd)
		fd = sub
	}
	f, err := unix.Openat(fd, "f", unix.O_WRONLY|unix.O_CREAT, 0o644)
	require.NoError(t, err)
	unix.Close(f)
	unix.Close(fd)

	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	heap := &heapAtWrites{}
	var errb bytes.Buffer
	code, err := RunBuiltin(agentwire.BuiltinGlobEnumerate, []string{"token", root, "MARK", "0", "", ""}, eofReader{}, heap, &errb)
	require.NoError(t, err)
	require.Equal(t, 0, code, errb.String())
	// The deepest path is some 80 KB; every level's kept would be 16 MB.
	assert.Less(t, heap.peak-min(heap.peak, base.HeapAlloc), uint64(4<<20), "live heap grew by %d bytes at the deepest file", heap.peak-base.HeapAlloc)
}

// deepChain makes depth nested directories of 200-byte names below root
// and files files at the bottom.
func deepChain(t *testing.T, root string, depth, files int) {
	t.Helper()
	name := strings.Repeat("n", 200)
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	for range depth {
		require.NoError(t, unix.Mkdirat(fd, name, 0o755))
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		require.NoError(t, err)
		unix.Close(fd)
		fd = sub
	}
	for i := range files {
		f, err := unix.Openat(fd, "f"+strconv.Itoa(i), unix.O_WRONLY|unix.O_CREAT, 0o644)
		require.NoError(t, err)
		unix.Close(f)
	}
	unix.Close(fd)
}

// The outputs listing walks down to maxListDepth levels, which a command
// can build in the outputs with a loop of mkdir and cd: a path kept per
// level would take 2,000 levels of 255-byte names to a gigabyte, past the
// sandbox's memory (and the agent would be the process killed for it), as
// would a thousand files at the bottom, each path kept whole though it is
// too long to be named and only counted.
func TestOutputsListDeepTreeMemory(t *testing.T) {
	root := t.TempDir()
	deepChain(t, root, 400, 200)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var out, errb bytes.Buffer
	code, err := RunBuiltin(agentwire.BuiltinOutputsList, []string{root, "100", "1000", "1000", "100", "0"}, eofReader{}, &out, &errb)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	require.Equal(t, 0, code, errb.String())
	assert.Equal(t, "200\x00", out.String(), "the files below are counted, unnamed")
	// Each level's own copy of its path would make 16 MB, each file's as many.
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(4<<20), "the walk allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
}
