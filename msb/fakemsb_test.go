package msb_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/msb"
)

// Every Client method end to end against fakemsb: the argv the builders
// produce is accepted, and what fakemsb prints parses.
func TestClientAgainstFakemsb(t *testing.T) {
	env := fakemsbtest.New(t)
	env.SetKnob("FAKEMSB_NOW", "2026-08-22T14:49:44Z")
	c := msb.NewClient(&msb.CLI{Path: env.Bin})
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	must(c.VolumeCreate(ctx, msb.VolumeCreateOptions{Name: "vol1"}))
	if err := c.VolumeCreate(ctx, msb.VolumeCreateOptions{Name: "vol1"}); !errors.Is(err, msb.ErrAlreadyExists) {
		t.Fatalf("second volume create: %v, want ErrAlreadyExists", err)
	}
	must(c.Create(ctx, msb.CreateOptions{
		Image: "debian", Name: "box1",
		Mounts:  []msb.NamedMount{{Volume: "vol1", Guest: "/workspace"}},
		Tmpfs:   []msb.Tmpfs{{Path: "/scratch", Size: "16M", Options: []string{"noexec"}}},
		Workdir: "/workspace", NoNet: true, CPUs: 2, Memory: "1G", RootDisk: "2G",
		MaxDuration: "2h", Security: "restricted", Pull: "if-missing", Quiet: true,
		Labels: []msb.Label{{Key: "team", Value: "a"}},
	}))
	if err := c.Create(ctx, msb.CreateOptions{Image: "debian", Name: "box1"}); !errors.Is(err, msb.ErrAlreadyExists) {
		t.Fatalf("second create: %v, want ErrAlreadyExists", err)
	}

	list, err := c.List(ctx, msb.ListOptions{Labels: []msb.Label{{Key: "team", Value: "a"}}})
	must(err)
	if len(list) != 1 || list[0].Name != "box1" || list[0].Status != "Running" || list[0].Image != "debian" ||
		!list[0].CreatedAt.Equal(time.Date(2026, 8, 22, 14, 49, 44, 0, time.UTC)) {
		t.Fatalf("list = %+v", list)
	}
	if none, err := c.List(ctx, msb.ListOptions{Labels: []msb.Label{{Key: "team", Value: "b"}}}); err != nil || len(none) != 0 {
		t.Fatalf("filtered list = %+v, %v", none, err)
	}

	info, err := c.Inspect(ctx, "box1")
	must(err)
	if info.Labels["team"] != "a" || info.CPUs != 2 || info.MemoryMiB != 1024 || info.Network || info.Workdir != "/workspace" || len(info.Mounts) != 2 {
		t.Fatalf("inspect = %+v", info)
	}

	res, err := c.Exec(ctx, msb.ExecOptions{Name: "box1", Argv: []string{"/bin/sh", "-c", "cat; echo $X; exit 3"}, Env: []string{"X=y"}},
		msb.Streams{Stdin: strings.NewReader("in\n")})
	var exitErr *msb.ExitError
	if !errors.As(err, &exitErr) || exitErr.Kind != nil || res.ExitCode != 3 || string(res.Stdout) != "in\ny\n" {
		t.Fatalf("exec = %+v, %v", res, err)
	}
	_, err = c.Exec(ctx, msb.ExecOptions{Name: "box1", Argv: []string{"sleep", "30"}, Timeout: "1s"}, msb.Streams{})
	if !errors.Is(err, msb.ErrExecTimedOut) {
		t.Fatalf("exec timeout: %v", err)
	}
	_, err = c.Exec(ctx, msb.ExecOptions{Name: "box1", Argv: []string{"no-such-command"}}, msb.Streams{})
	if !errors.Is(err, msb.ErrCannotStart) {
		t.Fatalf("exec of a missing command: %v", err)
	}

	host := filepath.Join(t.TempDir(), "f.txt")
	must(os.WriteFile(host, []byte("copied"), 0o644))
	ref, err := msb.PathRef("box1", "/workspace/f.txt")
	must(err)
	must(c.Copy(ctx, host, ref))
	back := filepath.Join(t.TempDir(), "back.txt")
	must(c.Copy(ctx, ref, back))
	if b, _ := os.ReadFile(back); string(b) != "copied" {
		t.Fatalf("copy round trip = %q", b)
	}

	if err := c.VolumeRemove(ctx, "vol1"); !errors.Is(err, msb.ErrVolumeAttached) {
		t.Fatalf("removing an attached volume: %v", err)
	}
	must(c.Stop(ctx, msb.StopOptions{Names: []string{"box1"}}))
	must(c.Start(ctx, "box1"))
	must(c.Stop(ctx, msb.StopOptions{Names: []string{"box1"}}))

	vols, err := c.VolumeList(ctx)
	must(err)
	if len(vols) != 1 || vols[0].Name != "vol1" || vols[0].Kind != "dir" {
		t.Fatalf("volume list = %+v", vols)
	}
	text, err := c.VolumeInspect(ctx, "vol1")
	must(err)
	if !strings.Contains(text, "vol1") {
		t.Fatalf("volume inspect = %q", text)
	}

	must(c.Remove(ctx, msb.RemoveOptions{Names: []string{"box1"}, Force: true}))
	if err := c.Remove(ctx, msb.RemoveOptions{Names: []string{"box1"}, Force: true}); !errors.Is(err, msb.ErrSandboxNotFound) {
		t.Fatalf("removing a removed sandbox: %v", err)
	}
	if _, err := c.Inspect(ctx, "box1"); !errors.Is(err, msb.ErrSandboxNotFound) {
		t.Fatalf("inspecting a removed sandbox: %v", err)
	}
	must(c.VolumeRemove(ctx, "vol1"))
	if err := c.VolumeRemove(ctx, "vol1"); !errors.Is(err, msb.ErrVolumeNotFound) {
		t.Fatalf("removing a removed volume: %v", err)
	}
}

// TestNetPolicyAgainstFakemsb: fakemsb takes the allowlist and secret
// flags and shows them in inspect as msb 0.6.18 does: the rules, the
// secret by reference and placeholder, never its value.
func TestNetPolicyAgainstFakemsb(t *testing.T) {
	env := fakemsbtest.New(t)
	t.Setenv("OMA_FAKE_TOKEN", "value-never-shown")
	c := msb.NewClient(&msb.CLI{Path: env.Bin})
	ctx := context.Background()
	err := c.Create(ctx, msb.CreateOptions{
		Image: "debian", Name: "netbox", NoNet: true, Quiet: true,
		NetRules: []msb.NetRule{
			{Action: "allow", Target: "example.com", Protocol: "tcp", Ports: "443"},
			{Action: "allow", Target: "*.pkg.dev"},
			{Action: "allow", Target: "[fd00::/8]", Protocol: "udp", Ports: "53"},
		},
		Secrets:           []msb.SecretRef{{Env: "OMA_FAKE_TOKEN", Hosts: []string{"example.com"}}},
		OnSecretViolation: "block-and-log",
	})
	if err != nil {
		t.Fatal(err)
	}
	// fakemsb enforces only TCP allow rules (through the egress proxy);
	// this policy has a UDP rule too, so it fails closed with no network
	// at all, and its inspect says so (real msb: enabled, with the rules).
	info, err := c.Inspect(ctx, "netbox")
	if err != nil || info.Network {
		t.Fatalf("inspect = %+v, %v; want fakemsb's allowlist to have no network", info, err)
	}
	res, err := (&msb.CLI{Path: env.Bin}).Run(ctx, msb.Call{Args: []string{"inspect", "netbox", "--format", "json"}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	for _, want := range []string{`"default_egress": "deny"`, `"domain": "example.com"`, `"domain_suffix": "pkg.dev"`,
		`"cidr": "fd00::/8"`, `"start": 443`, `"placeholder": "$MSB_OMA_FAKE_TOKEN"`, `"on_violation": "block-and-log"`} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "value-never-shown") {
		t.Errorf("inspect shows the secret's value:\n%s", out)
	}
	_, err = (&msb.CLI{Path: env.Bin}).Run(ctx, msb.Call{Args: []string{"create", "debian", "--name", "b2", "--no-net", "--net-rule", "allow@localhost"}})
	if err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("fakemsb took a single-label target: %v", err)
	}
}
