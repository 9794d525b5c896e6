// Package agenttest gives tests a freshly built oma-guest-agent without
// make.
package agenttest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

var (
	once  sync.Once
	dir   string
	bin   string
	built error
	out   []byte
)

// AgentEnv names an agent already built, which AgentBinary then returns:
// a test process run as another user (testutil.RunUnprivileged), which
// could not build one, is given its parent's.
const AgentEnv = "OMA_TEST_AGENT"

// AgentBinary builds cmd/oma-guest-agent for linux and this GOARCH, once
// per test process, and returns its path. It fails t when the build does.
// Call Cleanup when the tests are done (Main or MainNoLeaks as TestMain
// do it).
func AgentBinary(t testing.TB) string {
	t.Helper()
	if built := os.Getenv(AgentEnv); built != "" {
		return built
	}
	once.Do(func() {
		if dir, built = os.MkdirTemp("", "oma-guest-agent-"); built != nil {
			return
		}
		bin = filepath.Join(dir, "oma-guest-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/oma-sandbox/oma-sandbox/cmd/oma-guest-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
		out, built = cmd.CombinedOutput()
	})
	if built != nil {
		t.Fatalf("building oma-guest-agent: %v\n%s", built, out)
	}
	// The directory must be reachable by the users a test runs calls as.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// Cleanup removes what AgentBinary built and the cache IsolateCache made.
func Cleanup() {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	if cache != "" {
		_ = os.RemoveAll(cache)
	}
}

var cache string

// IsolateCache points XDG_CACHE_HOME at a directory of the test process's
// own, so that the agent copies sessions keep there (one per build of the
// agent) do not pile up in the user's cache. Main and MainNoLeaks call it.
func IsolateCache() {
	if cache != "" {
		return
	}
	d, err := os.MkdirTemp("", "oma-test-cache-")
	if err != nil {
		panic(err)
	}
	cache = d
	os.Setenv("XDG_CACHE_HOME", d)
}

// Main runs the package's tests, removes what AgentBinary built and exits
// with the tests' code: the TestMain of a package whose tests use the
// agent.
func Main(m *testing.M) {
	IsolateCache()
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// MainNoLeaks is Main that also fails the package if a test leaves a
// goroutine behind, such as the watcher of a channel never closed.
func MainNoLeaks(m *testing.M) {
	IsolateCache()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		Cleanup()
		os.Exit(code)
	}))
}
