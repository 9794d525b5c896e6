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

// dir holds the agents built, each built once per test process.
var (
	dirOnce  sync.Once
	dir      string
	dirErr   error
	current  = &agentBuild{name: "oma-guest-agent"}
	older    = &agentBuild{name: "oma-guest-agent-older", tags: "oma_older_agent"}
	previous = &agentBuild{name: "oma-guest-agent-previous", tags: "oma_previous_revision"}
)

type agentBuild struct {
	name, tags string
	once       sync.Once
	bin        string
	out        []byte
	err        error
}

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
	return current.build(t)
}

// OlderAgentEnv names such an agent already built (relative to the test's
// directory, or absolute), which OlderAgentBinary then returns: the
// real-VM suite's test binaries run where there is no Go to build one.
const OlderAgentEnv = "OMA_TEST_OLDER_AGENT"

// OlderAgentBinary builds an agent as AgentBinary does that lacks the ls
// and write builtins, as an agent older than this program would (the
// build tag oma_older_agent), for the tests of replacing one.
func OlderAgentBinary(t testing.TB) string {
	t.Helper()
	if built := os.Getenv(OlderAgentEnv); built != "" {
		abs, err := filepath.Abs(built)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	return older.build(t)
}

// PreviousAgentEnv names such an agent already built, which
// PreviousRevisionAgentBinary then returns, as AgentEnv does.
const PreviousAgentEnv = "OMA_TEST_PREVIOUS_AGENT"

// PreviousRevisionAgentBinary builds an agent as AgentBinary does that
// announces the revision before this one (agentwire.Revision - 1) and
// offers every builtin: an agent older than a fix of this program's (the
// build tag oma_previous_revision).
func PreviousRevisionAgentBinary(t testing.TB) string {
	t.Helper()
	if built := os.Getenv(PreviousAgentEnv); built != "" {
		return built
	}
	return previous.build(t)
}

func (b *agentBuild) build(t testing.TB) string {
	t.Helper()
	dirOnce.Do(func() { dir, dirErr = os.MkdirTemp("", "oma-guest-agent-") })
	if dirErr != nil {
		t.Fatal(dirErr)
	}
	b.once.Do(func() {
		b.bin = filepath.Join(dir, b.name)
		cmd := exec.Command("go", "build", "-trimpath", "-tags="+b.tags, "-o", b.bin, "github.com/oma-sandbox/oma-sandbox/cmd/oma-guest-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
		b.out, b.err = cmd.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("building oma-guest-agent (tags %q): %v\n%s", b.tags, b.err, b.out)
	}
	// The directory must be reachable by the users a test runs calls as.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return b.bin
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
	// Go's build cache lives under the user's cache too: keep it where it
	// is, or every agent this process builds compiles the world anew.
	if os.Getenv("GOCACHE") == "" {
		if user, err := os.UserCacheDir(); err == nil {
			os.Setenv("GOCACHE", filepath.Join(user, "go-build"))
		}
	}
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
