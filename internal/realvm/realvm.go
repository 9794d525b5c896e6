// Package realvm gives tests the real msb where it boots microVMs, with the
// guest image `make image` writes (bin/sandbox-image.tar) loaded into a
// private MSB_HOME. scripts/real-vm.sh runs those tests on a host where
// `msb doctor` passes, or in an outer guest where it does not.
package realvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/internal/realmsb"
	"github.com/oma-sandbox/oma-sandbox/msb"
)

// ImageArchive is where `make image` (scripts/build-image.sh) writes the
// guest image, relative to the module root.
const ImageArchive = "bin/sandbox-image.tar"

// ErrNoArchive: the image is neither cached nor built.
var ErrNoArchive = errors.New("no image archive")

// Doctor runs `msb doctor` and returns "" when it passes, else its verdict:
// the "error:" line and its "→" hints as msb printed them. An error means
// msb doctor could not run at all.
func Doctor(bin string, environ []string) (string, error) {
	res, err := (&msb.CLI{Path: bin, Env: environ}).Run(context.Background(), msb.Call{Args: []string{"doctor"}})
	var exitErr *msb.ExitError
	switch {
	case err == nil:
		return "", nil
	case res == nil || !errors.As(err, &exitErr):
		return "", fmt.Errorf("msb doctor: %w", err)
	}
	var verdict []string
	for _, line := range strings.Split(msb.StripANSI(string(res.Stderr)), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "error:") || len(verdict) > 0 && strings.HasPrefix(line, "→") {
			verdict = append(verdict, line)
		}
	}
	if len(verdict) == 0 {
		verdict = []string{err.Error()}
	}
	return "msb doctor says this host cannot boot a microVM: " + strings.Join(verdict, " "), nil
}

// EnsureImage makes sure ref is in msb's cache, loading it from archive
// when it is not. The error says what to do when neither works.
func EnsureImage(ctx context.Context, cli *msb.CLI, ref, archive string) error {
	inspect := msb.Call{Args: []string{"image", "inspect", ref, "--format", "json"}}
	if _, err := cli.Run(ctx, inspect); err == nil {
		return nil
	} else if !errors.Is(err, msb.ErrImageNotCached) {
		return fmt.Errorf("msb image inspect %s: %w", ref, err)
	}
	if _, err := os.Stat(archive); err != nil {
		return fmt.Errorf("%w: image %s is not in this MSB_HOME and %s is missing: run `make image` (or `make e2e-real`, which builds it)", ErrNoArchive, ref, archive)
	}
	if _, err := cli.Run(ctx, msb.Call{Args: []string{"load", "--quiet", "--tag", ref, "--input", archive}}); err != nil {
		return fmt.Errorf("msb load %s: %w", archive, err)
	}
	if _, err := cli.Run(ctx, inspect); err != nil {
		return fmt.Errorf("msb load %s did not cache %s: %w", archive, ref, err)
	}
	return nil
}

// ModuleFile is rel below the module root (the directory with go.mod above
// the test's working directory).
func ModuleFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, rel), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// VM is the real msb with ref loaded in Home, ready to boot sessions.
type VM struct {
	realmsb.Env
}

// CLI runs the real msb in the VM's MSB_HOME.
func (v *VM) CLI() *msb.CLI { return &msb.CLI{Path: v.Bin, Env: v.Environ()} }

// OperationTimeout bounds a guest command on a real VM in tests that do
// not test a timeout: under software emulation (an outer guest without
// KVM, see scripts/real-vm.sh) a session's first exec takes seconds.
const OperationTimeout = 2 * time.Minute

// HomeEnv names a directory whose msb-home the test processes of one run
// share one after another, so that each need not load the image again
// (scripts/real-vm-suite.sh sets it). Without it each process has its own
// in a temporary directory.
const HomeEnv = "OMA_REALVM_HOME"

var shared struct {
	once sync.Once
	vm   *VM
	temp string // the temporary directory of the process's own home
	skip string // why no VM can boot here
	err  error  // what went wrong where one should have
}

// sweep removes every sandbox and volume a shared home holds: what an
// earlier process of the run could not remove (its outer guest died).
// Nothing but the run's tests uses that home.
func sweep(cli *msb.CLI) error {
	client := msb.NewClient(cli)
	ctx := context.Background()
	left, err := client.List(ctx, msb.ListOptions{})
	if err != nil {
		return err
	}
	for _, sb := range left {
		if _, err := cli.Run(ctx, msb.Call{Args: []string{"remove", "--force", sb.Name}}); err != nil {
			return fmt.Errorf("removing %s left by an earlier process: %w", sb.Name, err)
		}
	}
	vols, err := client.VolumeList(ctx)
	if err != nil {
		return err
	}
	for _, v := range vols {
		if err := client.VolumeRemove(ctx, v.Name); err != nil {
			return fmt.Errorf("removing volume %s left by an earlier process: %w", v.Name, err)
		}
	}
	return nil
}

// Shared is one VM per test process, its MSB_HOME in a temporary directory
// that Cleanup removes, with image loaded. It fails t where msb cannot boot
// a microVM or the image is missing: a test asks for it only when a real
// VM was asked for (OMA_TEST_BACKENDS).
func Shared(t testing.TB, image string) *VM {
	t.Helper()
	vm, reason := boot(image)
	if vm == nil {
		t.Fatalf("a real VM was asked for, but %s", reason)
	}
	return vm
}

// Booting is Shared for a test that runs wherever a VM boots: it skips t,
// with the reason, where msb is not installed, msb doctor fails or the
// image was never built, and fails it only where a VM should have booted.
func Booting(t testing.TB, image string) *VM {
	t.Helper()
	vm, reason := boot(image)
	switch {
	case vm != nil:
		return vm
	case shared.err != nil:
		t.Fatal(reason)
	}
	t.Skip(reason)
	return nil
}

func boot(image string) (*VM, string) {
	shared.once.Do(func() {
		wd, err := os.Getwd()
		if err != nil {
			shared.err = err
			return
		}
		bin, err := realmsb.Bin(wd)
		if err != nil {
			shared.skip = err.Error()
			return
		}
		home, kept := os.LookupEnv(HomeEnv)
		if kept {
			if shared.err = os.MkdirAll(home, 0o700); shared.err != nil {
				return
			}
		} else {
			if home, err = os.MkdirTemp("", "oma-realvm-"); err != nil {
				shared.err = err
				return
			}
			shared.temp = home
		}
		vm := &VM{realmsb.Env{Bin: bin, Home: filepath.Join(home, "msb-home")}}
		shared.vm = vm // for Cleanup, until it proves usable
		if shared.skip, shared.err = Doctor(bin, vm.Environ()); shared.err != nil || shared.skip != "" {
			return
		}
		if kept {
			if shared.err = sweep(vm.CLI()); shared.err != nil {
				return
			}
		}
		archive, err := ModuleFile(ImageArchive)
		if err == nil {
			err = EnsureImage(context.Background(), vm.CLI(), image, archive)
		}
		if errors.Is(err, ErrNoArchive) {
			shared.skip = err.Error()
		} else {
			shared.err = err
		}
	})
	switch {
	case shared.err != nil:
		return nil, "real msb: " + shared.err.Error()
	case shared.skip != "":
		return nil, shared.skip
	}
	return shared.vm, ""
}

// Cleanup closes the sessions Open kept for the next test, checks that msb
// lists nothing of theirs, and removes the process's own MSB_HOME; a TestMain
// calls it after the tests and fails when it returns an error.
func Cleanup() error {
	err := closeIdle()
	if shared.temp != "" {
		_ = os.RemoveAll(shared.temp)
	}
	return err
}

// Backends is OMA_TEST_BACKENDS, the backends a package's shared suite was
// asked to run on (comma-separated); nil when it names none, for the
// package's own default.
func Backends() []string {
	if list := os.Getenv("OMA_TEST_BACKENDS"); list != "" {
		return strings.Split(list, ",")
	}
	return nil
}

// Main runs a package's tests, then Cleanup and agenttest's, and exits with
// the tests' code, or 1 when Cleanup finds what a real VM's session left:
// the TestMain of a package whose suites may run on a real VM.
func Main(m *testing.M) {
	agenttest.IsolateCache()
	code := m.Run()
	if err := Cleanup(); err != nil {
		fmt.Fprintln(os.Stderr, "real VM:", err)
		code = 1
	}
	agenttest.Cleanup()
	os.Exit(code)
}
