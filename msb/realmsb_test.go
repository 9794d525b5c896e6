//go:build linux

package msb

import (
	"context"
	"os/exec"
	"slices"
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
