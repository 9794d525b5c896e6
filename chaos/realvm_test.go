//go:build unix

package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oma-sandbox/oma-sandbox/guestagent/bundle"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/realvm"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// Under software emulation a VM takes 10-20 s to create and each msb exec
// about a second, so a few sessions one at a time already take minutes.
var (
	vmSessionsFlag = flag.Int("chaos.vmsessions", 4, "sessions TestChaosRealVM opens on real microVMs")
	vmWorkersFlag  = flag.Int("chaos.vmworkers", 1, "TestChaosRealVM's sessions in flight at once")
	vmScaleFlag    = flag.Int("chaos.vmscale", 20, "how many times TestChaos's timeouts, deadlines and allowances TestChaosRealVM gives its operations")
)

// TestChaosRealVM runs TestChaos's sessions on the real msb, each booting a
// microVM: random cancellations, parallel calls, the hostile guest's
// commands and the forged records, half the sessions over the guest
// agent's channel (the agent bundled into the test binary), half with one
// msb exec per call; but no faults, which only fakemsb injects. Its timing
// is TestChaos's scaled by -chaos.vmscale. It skips, with msb doctor's
// reason, where no microVM boots; scripts/real-vm.sh runs it in an outer
// guest. It fails on TestChaos's checks that apply to the real msb: msb
// lists a sandbox, volume or snapshot of the run once every session is
// closed; a process of the run is left, or a goroutine; an operation ends
// untyped or past its deadline, allowance and slack; a poisoned session
// lost its workspace volume or the file it wrote; a result leaves the
// workspace; bash believes a forged record. fakemsb's holder processes,
// and the reaper pass that only clears leaks for the checks after it, have
// no counterpart here.
func TestChaosRealVM(t *testing.T) {
	vm := realvm.Booting(t, microvm.DefaultImage)
	if _, ok := bundle.Binary(bundle.GuestArch()); !ok {
		t.Fatal("no guest agent is bundled into this test binary: run make agent before building it")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	seed := pickSeed()
	t.Logf("seed %d (rerun with -run TestChaosRealVM -chaos.seed=%d -chaos.vmsessions=%d -chaos.vmworkers=%d -chaos.vmscale=%d)",
		seed, seed, *vmSessionsFlag, *vmWorkersFlag, *vmScaleFlag)

	rec := newRecorder(hostTiming.scaled(*vmScaleFlag))
	client := msb.NewClient(vm.CLI())
	tg := target{
		cli:   vm.CLI(),
		image: microvm.DefaultImage,
		volumeDir: func(volume string) (string, error) {
			return msbVolumeDir(client, volume, rec.timing.opTimeout)
		},
	}
	took := runPool(*vmWorkersFlag, *vmSessionsFlag, seed, func(_, k int, rng *rand.Rand) {
		runSession(tg, rec, k, rng)
	})
	t.Logf("%d sessions on real microVMs in %v", *vmSessionsFlag, took)

	checkMsbClean(t, client, rec)
	// The sessions' msb invocations, and what they started, run with the
	// VM's MSB_HOME in their environment.
	checkNoProcessesWith(t, map[string]string{"MSB_HOME=" + vm.Home: "real msb"})
	rec.summary(t)
}

// msbVolumeDir returns the host directory msb keeps volume's files in: the
// Path line of msb volume inspect, which has no JSON form.
func msbVolumeDir(client *msb.Client, volume string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	text, err := client.VolumeInspect(ctx, volume)
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(text, "\n") {
		if dir, ok := strings.CutPrefix(line, "Path:"); ok {
			return strings.TrimSpace(dir), nil
		}
	}
	return "", fmt.Errorf("msb volume inspect %s names no path: %q", volume, text)
}

// checkMsbClean fails for every sandbox, volume or snapshot of the run
// that msb still lists: sandboxes by the workspace label runSession gives
// them, volumes and snapshots (msb lists no labels for them) by the name
// prefix.
func checkMsbClean(t *testing.T, client *msb.Client, rec *recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*rec.timing.opTimeout)
	defer cancel()
	const prefix = "oma-chaos-"
	var left []string
	sandboxes, err := client.List(ctx, msb.ListOptions{Labels: []msb.Label{{Key: session.LabelWorkspaceID, Value: "chaos"}}})
	if err != nil {
		t.Errorf("msb list: %v", err)
	}
	for _, s := range sandboxes {
		left = append(left, s.Name)
	}
	volumes, err := client.VolumeList(ctx)
	if err != nil {
		t.Errorf("msb volume list: %v", err)
	}
	for _, v := range volumes {
		if strings.HasPrefix(v.Name, prefix) {
			left = append(left, v.Name)
		}
	}
	snapshots, err := client.SnapshotList(ctx)
	if err != nil {
		t.Errorf("msb snapshot list: %v", err)
	}
	for _, s := range snapshots {
		if strings.HasPrefix(s.Name, prefix) {
			left = append(left, s.Name)
		}
	}
	for _, name := range left {
		t.Errorf("real msb: %s left by its session:%s", name, rec.trailOf(name))
	}
}

// msbVolumeDir finds the directory fakemsb keeps a volume in, from the
// text it prints as the real msb does.
func TestMsbVolumeDir(t *testing.T) {
	requireFakemsb(t)
	env := fakemsbtest.New(t)
	env.Run(t, "volume", "create", "vol")
	client := msb.NewClient(&msb.CLI{Path: env.Bin})
	want, _ := fakemsbVolumeDir(env)("vol")
	if got, err := msbVolumeDir(client, "vol", time.Minute); got != want || err != nil {
		t.Errorf("msbVolumeDir: %q, %v; want %q", got, err, want)
	}
	if _, err := msbVolumeDir(client, "missing", time.Minute); !errors.Is(err, msb.ErrVolumeNotFound) {
		t.Errorf("msbVolumeDir of a missing volume: %v, want msb.ErrVolumeNotFound", err)
	}
}
