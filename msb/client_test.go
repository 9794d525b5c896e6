package msb

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// recorder is a Runner that returns canned output and records each Call.
type recorder struct {
	calls  []Call
	stdout string
	err    error
}

func (r *recorder) Run(_ context.Context, c Call) (*Result, error) {
	r.calls = append(r.calls, c)
	return &Result{Args: c.Args, Stdout: []byte(r.stdout)}, r.err
}

func TestClientArgv(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		do   func(c *Client) error
		want string
	}{
		{"create", func(c *Client) error { return c.Create(ctx, CreateOptions{Image: "alpine", Name: "b", Quiet: true}) }, "create alpine --name b --quiet"},
		{"exec", func(c *Client) error {
			_, err := c.Exec(ctx, ExecOptions{Name: "b", Argv: []string{"true"}}, Streams{})
			return err
		}, "exec b -- true"},
		{"copy", func(c *Client) error { return c.Copy(ctx, "/tmp/x", "b:/workspace/x") }, "copy /tmp/x b:/workspace/x"},
		{"stop", func(c *Client) error { return c.Stop(ctx, StopOptions{Names: []string{"b"}, Force: true}) }, "stop --force b"},
		{"start", func(c *Client) error { return c.Start(ctx, "b") }, "start b"},
		{"remove", func(c *Client) error { return c.Remove(ctx, RemoveOptions{Names: []string{"b"}, Force: true}) }, "remove --force b"},
		{"volume create", func(c *Client) error { return c.VolumeCreate(ctx, VolumeCreateOptions{Name: "v"}) }, "volume create --name v"},
		{"volume remove", func(c *Client) error { return c.VolumeRemove(ctx, "v") }, "volume remove v"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{}
			if err := tt.do(NewClient(r)); err != nil {
				t.Fatal(err)
			}
			if len(r.calls) != 1 || !slices.Equal(r.calls[0].Args, strings.Fields(tt.want)) {
				t.Fatalf("calls = %+v, want %q", r.calls, tt.want)
			}
		})
	}
}

func TestClientPassesErrorsAndStreams(t *testing.T) {
	ctx := context.Background()
	r := &recorder{err: &ExitError{Args: []string{"remove", "b"}, ExitCode: 1, Kind: ErrSandboxNotFound}}
	c := NewClient(r)
	if err := c.Remove(ctx, RemoveOptions{Names: []string{"b"}}); !errors.Is(err, ErrSandboxNotFound) {
		t.Fatalf("Remove = %v", err)
	}
	if err := c.Remove(ctx, RemoveOptions{Names: []string{"-b"}}); !errors.Is(err, ErrInvalid) || len(r.calls) != 1 {
		t.Fatalf("invalid Remove = %v after %d calls; want ErrInvalid without running msb", err, len(r.calls))
	}

	r = &recorder{}
	var got []byte
	stdin := strings.NewReader("in")
	_, err := NewClient(r).Exec(ctx, ExecOptions{Name: "b", Argv: []string{"cat"}},
		Streams{Stdin: stdin, Stdout: func(p []byte) { got = append(got, p...) }, MaxOutput: 99})
	if err != nil || len(r.calls) != 1 {
		t.Fatal(err)
	}
	call := r.calls[0]
	call.Stdout([]byte("x"))
	if call.Stdin != stdin || call.Stderr != nil || call.MaxOutput != 99 || string(got) != "x" {
		t.Errorf("streams not passed through: %+v", call)
	}
}

func TestClientParses(t *testing.T) {
	ctx := context.Background()
	list := &recorder{stdout: `[{"created_at":"2026-08-22T14:49:44Z","image":"alpine","name":"b","status":"Running"}]`}
	sbs, err := NewClient(list).List(ctx, ListOptions{Labels: []Label{{"oma.session", "s"}}})
	if err != nil || len(sbs) != 1 || sbs[0].Name != "b" {
		t.Fatalf("List = %+v, %v", sbs, err)
	}
	if want := strings.Fields("list --format json --label oma.session=s"); !slices.Equal(list.calls[0].Args, want) {
		t.Errorf("List argv = %q", list.calls[0].Args)
	}
	if _, err := NewClient(&recorder{stdout: "not json"}).List(ctx, ListOptions{}); !errors.Is(err, ErrMalformedOutput) {
		t.Errorf("List of garbage = %v", err)
	}

	vols, err := NewClient(&recorder{stdout: `[{"name":"v","created_at":"2026-08-22T14:49:44Z"}]`}).VolumeList(ctx)
	if err != nil || len(vols) != 1 || vols[0].Name != "v" {
		t.Fatalf("VolumeList = %+v, %v", vols, err)
	}

	info, err := NewClient(&recorder{stdout: inspectSample}).Inspect(ctx, "box1")
	if err != nil || info.Name != "box1" {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if _, err := NewClient(&recorder{stdout: inspectSample}).Inspect(ctx, "other"); !errors.Is(err, ErrMalformedOutput) {
		t.Errorf("Inspect of another sandbox's description = %v", err)
	}

	text, err := NewClient(&recorder{stdout: "\x1b[1mName\x1b[0m  v\n"}).VolumeInspect(ctx, "v")
	if err != nil || text != "Name  v\n" {
		t.Errorf("VolumeInspect = %q, %v", text, err)
	}

	failing := &recorder{err: errors.New("boom")}
	if _, err := NewClient(failing).VolumeList(ctx); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("VolumeList error not passed: %v", err)
	}
}

func TestClientDefaultRunner(t *testing.T) {
	if _, ok := (&Client{}).runner().(*CLI); !ok {
		t.Error("zero Client does not default to *CLI")
	}
	var nilClient *Client
	if _, ok := nilClient.runner().(*CLI); !ok {
		t.Error("nil Client does not default to *CLI")
	}
	if _, ok := NewClient(&recorder{}).runner().(*recorder); !ok {
		t.Error("NewClient lost its runner")
	}
}
