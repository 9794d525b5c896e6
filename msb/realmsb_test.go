//go:build linux

package msb

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/oma-sandbox/oma-sandbox/internal/realmsb"
)

// TestRealMSBHomeIsShared: with MSB_HOME set in the host environment, our
// client and the user's own `msb` see the same volumes.
func TestRealMSBHomeIsShared(t *testing.T) {
	env := realmsb.New(t)
	t.Setenv("MSB_HOME", env.Home)
	ctx := context.Background()
	theirs := exec.Command(env.Bin, "volume", "create", "--name", "made-by-msb")
	theirs.Env = append(theirs.Environ(), "NO_COLOR=1")
	if out, err := theirs.CombinedOutput(); err != nil {
		t.Fatalf("msb volume create: %v\n%s", err, out)
	}
	c := NewClient(&CLI{Path: env.Bin})
	if err := c.VolumeCreate(ctx, VolumeCreateOptions{Name: "made-by-client"}); err != nil {
		t.Fatal(err)
	}
	ours, err := c.VolumeList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range ours {
		names = append(names, v.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"made-by-client", "made-by-msb"}) {
		t.Errorf("client lists %v, want both volumes", names)
	}
	list := exec.Command(env.Bin, "volume", "list", "--format", "json")
	out, err := list.Output()
	if err != nil {
		t.Fatal(err)
	}
	vols, err := ParseVolumeList(out)
	if err != nil || len(vols) != 2 {
		t.Errorf("msb volume list sees %d volumes (%v), want 2:\n%s", len(vols), err, out)
	}
	sandboxes, err := c.List(ctx, ListOptions{})
	if err != nil || len(sandboxes) != 0 {
		t.Errorf("List = %v, %v; want an empty listing of the shared home", sandboxes, err)
	}
}

// TestRealMSBAcceptsEveryArgv: every argv our builders produce, with every
// option set, gets past the real msb's command-line parser (clap's usage
// errors exit 2 and print "Usage:"). The sandbox does not exist and the
// image is not cached, so each command fails before doing anything.
func TestRealMSBAcceptsEveryArgv(t *testing.T) {
	env := realmsb.New(t)
	host := filepath.Join(t.TempDir(), "host.txt")
	must := func(args []string, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return args
	}
	const box = "contract-box"
	ref, err := PathRef(box, "/workspace/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	labels := []Label{{Key: "oma", Value: "contract"}, {Key: "bare", Value: ""}}
	conf, err := WriteSnapshotConf(t.TempDir(), "contract-snap")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host, []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want error // nil: success
	}{
		{must(CreateOptions{
			Image: "contract/missing:1", Name: box,
			Mounts:  []NamedMount{{Volume: "contract-vol", Guest: "/workspace", Options: []string{"rw", "nosuid"}}},
			Tmpfs:   []Tmpfs{{Path: "/scratch", Size: "64M", Options: []string{"noexec", "nodev"}}, {Path: "/t"}},
			Workdir: "/workspace", NoNet: true, CPUs: 2, Memory: "1G", RootDisk: "2G",
			MaxDuration: "2h", IdleTimeout: "30m", Security: "restricted", Pull: "never", Quiet: true,
			Labels: labels, Replace: true, CopyFiles: []CopyFile{{Src: host, Dst: "/.oma-sandbox/agent"}},
		}.Args()), ErrImageNotCached},
		// msb stats a copy-file source before it looks for the image.
		{must(CreateOptions{Image: "contract/missing:1", Name: box, Pull: "never",
			CopyFiles: []CopyFile{{Src: host + ".missing", Dst: "/x"}}}.Args()), errExit1},
		{must(CreateOptions{
			Image: "contract/missing:1", Name: box, NoNet: true,
			NetRules: []NetRule{
				{Action: "allow", Target: "example.com", Protocol: "tcp", Ports: "443"},
				{Action: "allow", Target: "*.pkg.dev"},
				{Action: "allow", Target: "127.0.0.1", Protocol: "tcp", Ports: "8080"},
				{Action: "allow", Target: "10.0.0.0/8", Protocol: "tcp", Ports: "1-1024"},
				{Action: "allow", Target: "[fd00::/8]", Protocol: "udp", Ports: "53"},
				{Action: "deny", Target: "[::1]", Protocol: "any", Ports: "any"},
				{Action: "allow", Target: "host", Protocol: "tcp", Ports: "8080"},
				{Action: "allow", Target: "host.microsandbox.internal"},
			},
			Secrets:           []SecretRef{{Env: "CONTRACT_TOKEN", Hosts: []string{"example.com", "*.pkg.dev", "127.0.0.1"}}},
			OnSecretViolation: "block-and-log", Pull: "never",
		}.Args()), ErrImageNotCached},
		{must(CreateOptions{Image: "contract/missing:1", Name: box, NoNet: true, Pull: "never",
			NetRules: []NetRule{
				{Action: "allow", Direction: "ingress", Target: "any", Protocol: "tcp", Ports: "8080"},
				{Action: "allow", Direction: "ingress", Target: "any", Protocol: "udp", Ports: "53"},
				{Action: "allow", Direction: "egress", Target: "example.com"},
			},
			Ports: []PortForward{
				{Host: 18080, Guest: 8080}, {Addr: "0.0.0.0", Host: 18081, Guest: 8081, Protocol: "tcp"},
				{Addr: "::1", Host: 18082, Guest: 53, Protocol: "udp"}, {Addr: "127.0.0.2", Host: 18083, Guest: 80},
			},
		}.Args()), ErrImageNotCached},
		{must(CreateOptions{Image: "contract/missing:1", Name: box, NetDefaultEgress: "deny", Pull: "never",
			NetRules: []NetRule{{Action: "allow", Target: "example.com"}}}.Args()), ErrImageNotCached},
		{must(ExecOptions{Name: box, Argv: []string{"bash", "-c", "echo --help"}, Stream: true, User: "65534",
			Timeout: "10s", Workdir: "/workspace", Env: []string{"A=b", "EMPTY="}}.Args()), ErrSandboxNotFound},
		{must(ExecOptions{Name: box, Argv: []string{"true"}}.Args()), ErrSandboxNotFound},
		{must(CopyArgs(ref, host)), ErrSandboxNotFound},
		{must(CopyArgs(host, ref)), ErrSandboxNotFound},
		{must(StopOptions{Names: []string{box}, Force: true, Timeout: 5}.Args()), ErrSandboxNotFound},
		{must(StopOptions{Names: []string{box}}.Args()), ErrSandboxNotFound},
		{must(StartArgs(box)), ErrSandboxNotFound},
		{must(ModifyOptions{Name: box, CPUs: 2, Memory: "1G"}.Args()), ErrSandboxNotFound},
		{must(ModifyOptions{Name: box, CPUs: 255, NextStart: true}.Args()), ErrSandboxNotFound},
		{must(ModifyOptions{Name: box, Memory: "1.5G", Restart: true}.Args()), ErrSandboxNotFound},
		{must(MetricsArgs(box)), ErrSandboxNotFound},
		{must(RemoveOptions{Names: []string{box}, Force: true}.Args()), ErrSandboxNotFound},
		{must(ListOptions{Labels: labels, Running: true, Stopped: true}.Args()), nil},
		{must(InspectArgs(box)), ErrSandboxNotFound},
		{must(VolumeCreateOptions{Name: "contract-vol"}.Args()), nil},
		{must(VolumeCreateOptions{Name: "contract-vol", Kind: "dir"}.Args()), ErrAlreadyExists},
		// Too small for ext4: msb refuses it after parsing, exit 1.
		{must(VolumeCreateOptions{Name: "contract-disk", Kind: "disk", Size: "8M"}.Args()), errExit1},
		{VolumeListArgs(), nil},
		{must(VolumeInspectArgs("contract-vol")), nil},
		{must(VolumeRemoveArgs("contract-vol")), nil},
		{must(VolumeRemoveArgs("contract-vol", "contract-vol2")), ErrVolumeNotFound},
		{must(VolumeInspectArgs("contract-vol")), ErrVolumeNotFound},
		{must(SnapshotCreateOptions{Name: "contract-snap", From: box, Labels: labels, Quiet: true}.Args()), ErrSandboxNotFound},
		{SnapshotListArgs(), nil},
		{must(SnapshotRemoveArgs("contract-snap", "contract-snap2")), ErrSnapshotNotFound},
		// The snapshot a fork boots from, named in a --conf file, with
		// every flag a session's create uses.
		{must(CreateOptions{
			Conf: conf, Name: box,
			Mounts:  []NamedMount{{Volume: "contract-vol", Guest: "/workspace"}},
			Tmpfs:   []Tmpfs{{Path: "/scratch", Size: "64M", Options: []string{"noexec", "nodev", "nosuid"}}},
			Workdir: "/workspace", NoNet: true, CPUs: 2, Memory: "1G", RootDisk: "2G",
			MaxDuration: "2h", IdleTimeout: "30m", Security: "restricted", Pull: "never", Quiet: true,
			Labels:   labels,
			NetRules: []NetRule{{Action: "allow", Direction: "ingress", Target: "any", Protocol: "tcp", Ports: "8080"}},
			Ports:    []PortForward{{Host: 18080, Guest: 8080}},
		}.Args()), errExit1}, // error: snapshot not found: .../contract-snap
	}
	cli := &CLI{Path: env.Bin, Env: env.Environ()}
	for _, c := range cases {
		res, err := cli.Run(context.Background(), Call{Args: c.args})
		var exitErr *ExitError
		switch {
		case res == nil:
			t.Errorf("msb %q did not run: %v", c.args, err)
		case res.ExitCode == 2 || strings.Contains(string(res.Stderr), "Usage:"):
			t.Errorf("msb refused the command line %q:\n%s", c.args, res.Stderr)
		case c.want == nil && err != nil:
			t.Errorf("msb %q: %v, want success", c.args, err)
		case c.want == errExit1 && (!errors.As(err, &exitErr) || exitErr.ExitCode != 1):
			t.Errorf("msb %q: %v, want exit 1", c.args, err)
		case c.want != nil && c.want != errExit1 && !errors.Is(err, c.want):
			t.Errorf("msb %q: %v, want %v", c.args, err, c.want)
		}
	}
}

// errExit1 marks a case that must fail with msb's own exit 1.
var errExit1 = errors.New("exit 1")
