package realvm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oma-sandbox/oma-sandbox/guestagent/bundle"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// workspaceID labels every session Open makes, so that msb's listing shows
// what they left.
const workspaceID = "realvm"

// resetScript brings a session kept by Open back to how Create left it: no
// process of the agent user (a killed one its parent has not reaped yet, a
// zombie, is gone but for its pid), nothing in the workspace, the uploads, the
// outputs or /tmp, the mount points' owners and modes as Create sets them.
const resetScript = `set -u
alive() { ps -u 65534 -o stat= | grep -qv '^Z'; }
for i in $(seq 100); do
  alive || break
  pkill -KILL -u 65534
  sleep 0.1
done
if alive; then echo "processes of 65534 survive: $(ps -u 65534 -o pid=,stat=,args=)" >&2; exit 1; fi
for d in /workspace /mnt/session/uploads /mnt/session/outputs /tmp; do
  find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + || exit 1
done
chown 65534:65534 /workspace && chmod 755 /workspace &&
chown 0:0 /mnt/session/uploads && chmod 755 /mnt/session/uploads &&
chown 65534:65534 /mnt/session/outputs && chmod 700 /mnt/session/outputs &&
chmod 1777 /tmp
`

// kept is a session Open made, with the runner that counts its msb calls.
type kept struct {
	s      *microvm.Session
	runner *recordingRunner
	client *msb.Client
}

var idle struct {
	mu sync.Mutex
	// byChannel holds, per transport, the session the last test left in
	// a state to be used again.
	byChannel map[bool]*kept
}

// Open gives t a session on the Shared VM with the default image and the
// guest agent bundled into the test binary (make agent): its calls go over
// the agent's channel when channel is set, else by one msb exec each. A session boots a microVM, which takes
// seconds under emulation, so a test that passed hands its session on to
// the next test of the process, reset as Create left it (resetScript); one
// that failed, or whose session was poisoned or closed, has it closed and
// the next test gets a new one. The test's cleanup checks that every call
// it made went the way asked: a silent fallback to one exec per call, or a
// plain msb exec on the channel's session, fails it. calls counts the test's round trips: msb
// invocations, or calls on the channel.
func Open(t *testing.T, channel bool) (s *microvm.Session, calls func() int) {
	t.Helper()
	if !bundle.Embedded(bundle.GuestArch()) {
		t.Fatal("no guest agent is bundled into this test binary: run make agent before building it")
	}
	k := takeIdle(t, channel)
	served := k.s.Served()
	runs, starts := len(k.runner.ran()), len(k.runner.started())
	since := func() microvm.Served {
		now := k.s.Served()
		now.Exec -= served.Exec
		now.Channel -= served.Channel
		for name, n := range served.Builtins {
			now.Builtins[name] -= n
		}
		return now
	}
	t.Cleanup(func() {
		n := since()
		if !channel {
			require.Zero(t, n.Channel, "a call on the channel of a session without the agent: %+v", n)
			require.Len(t, k.runner.started(), starts, "a channel opened in a session without the agent")
		} else {
			require.Zero(t, n.Exec, "a call fell back to one msb exec: %+v", n)
			for _, argv := range k.runner.ran()[runs:] {
				require.NotEqual(t, "exec", argv[0], "a call left the channel: %q", argv)
			}
		}
		if t.Failed() || k.s.Poisoned() {
			require.NoError(t, closeKept(k))
			return
		}
		idle.mu.Lock()
		defer idle.mu.Unlock()
		if old := idle.byChannel[channel]; old != nil {
			require.NoError(t, closeKept(old))
		}
		idle.byChannel[channel] = k
	})
	return k.s, func() int {
		if !channel {
			return len(k.runner.ran()) - runs
		}
		n := since()
		return n.Channel + n.Exec
	}
}

// takeIdle returns the session kept for this transport, reset, or a new one.
func takeIdle(t *testing.T, channel bool) *kept {
	t.Helper()
	idle.mu.Lock()
	k := idle.byChannel[channel]
	delete(idle.byChannel, channel)
	if idle.byChannel == nil {
		idle.byChannel = map[bool]*kept{}
	}
	idle.mu.Unlock()
	if k != nil {
		res, err := k.s.Shell(context.Background(), session.Command{Script: resetScript}, session.ShellOptions{User: "0"})
		if err == nil && res.ExitCode == 0 {
			return k
		}
		t.Logf("a kept session could not be reset (%v, %+v): a new one", err, resetOutcome(res))
		require.NoError(t, closeKept(k))
	}
	vm := Shared(t, microvm.DefaultImage)
	runner := &recordingRunner{inner: vm.CLI()}
	client := msb.NewClient(runner)
	s, err := microvm.Create(context.Background(), microvm.Options{
		Client: client, WorkspaceID: workspaceID, SessionID: "s1",
		OperationTimeout: OperationTimeout,
	})
	require.NoError(t, err)
	if !channel {
		s.DisableAgentChannel()
	}
	return &kept{s: s, runner: runner, client: client}
}

// closeKept closes a session Open made and checks msb lists nothing of it.
func closeKept(k *kept) error {
	ctx := context.Background()
	if err := k.s.Close(ctx); err != nil {
		return err
	}
	left, err := k.client.List(ctx, msb.ListOptions{})
	if err != nil {
		return err
	}
	for _, sb := range left {
		if sb.Name == k.s.Name() {
			return fmt.Errorf("sandbox %s is left after its Close", sb.Name)
		}
	}
	vols, err := k.client.VolumeList(ctx)
	if err != nil {
		return err
	}
	for _, v := range vols {
		if v.Name == k.s.Names().Volume {
			return fmt.Errorf("volume %s is left after its Close", v.Name)
		}
	}
	return nil
}

// closeIdle closes the kept sessions, then checks that msb lists no
// sandbox of any session Open made.
func closeIdle() error {
	idle.mu.Lock()
	defer idle.mu.Unlock()
	var errs []error
	var client *msb.Client
	for _, k := range idle.byChannel {
		errs = append(errs, closeKept(k))
		client = k.client
	}
	idle.byChannel = nil
	if client != nil {
		left, err := client.List(context.Background(), msb.ListOptions{Labels: []msb.Label{{Key: session.LabelWorkspaceID, Value: workspaceID}}})
		errs = append(errs, err)
		if len(left) > 0 {
			errs = append(errs, fmt.Errorf("sandboxes left: %+v", left))
		}
	}
	return errors.Join(errs...)
}

// recordingRunner keeps the argv of every msb invocation: those run to
// their end, and those started to keep running (a channel's exec --stream).
type recordingRunner struct {
	inner  *msb.CLI
	mu     sync.Mutex
	runs   [][]string
	starts [][]string
}

func (r *recordingRunner) Run(ctx context.Context, c msb.Call) (*msb.Result, error) {
	r.mu.Lock()
	r.runs = append(r.runs, slices.Clone(c.Args))
	r.mu.Unlock()
	return r.inner.Run(ctx, c)
}

func (r *recordingRunner) Start(ctx context.Context, c msb.Call) (*msb.Process, error) {
	r.mu.Lock()
	r.starts = append(r.starts, slices.Clone(c.Args))
	r.mu.Unlock()
	return r.inner.Start(ctx, c)
}

func (r *recordingRunner) ran() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

func (r *recordingRunner) started() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.starts)
}

func resetOutcome(res *session.Result) string {
	if res == nil {
		return "no result"
	}
	return fmt.Sprintf("exit %d, stderr %q", res.ExitCode, res.Stderr)
}
