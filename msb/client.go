package msb

import (
	"context"
	"fmt"
	"os"
)

// NewClient returns a Client that runs msb through r; nil means &CLI{}.
func NewClient(r Runner) *Client { return &Client{Runner: r} }

func (c *Client) runner() Runner {
	if c == nil || c.Runner == nil {
		return &CLI{}
	}
	return c.Runner
}

// run executes argv built by a builder, passing its validation error on.
func (c *Client) run(ctx context.Context, args []string, err error) (*Result, error) {
	if err != nil {
		return nil, err
	}
	return c.runner().Run(ctx, Call{Args: args})
}

// Create runs `msb create`, with the variables of o.Secrets taken from
// this process's environment added to msb's for this call only.
func (c *Client) Create(ctx context.Context, o CreateOptions) error {
	args, err := o.Args()
	if err != nil {
		return err
	}
	env, err := o.secretEnv(os.LookupEnv)
	if err != nil {
		return err
	}
	_, err = c.runner().Run(ctx, Call{Args: args, Env: env})
	return err
}

// Exec runs `msb exec` with s's stdin, callbacks and output cap. The Result
// comes back with a non-zero exit too: a guest's own exit code is not an
// msb failure, and its ExitError has a nil Kind.
func (c *Client) Exec(ctx context.Context, o ExecOptions, s Streams) (*Result, error) {
	args, err := o.Args()
	if err != nil {
		return nil, err
	}
	return c.runner().Run(ctx, Call{
		Args:      args,
		Stdin:     s.Stdin,
		Stdout:    s.Stdout,
		Stderr:    s.Stderr,
		MaxOutput: s.MaxOutput,
	})
}

// Copy runs `msb copy SRC DST`; see CopyArgs and PathRef.
func (c *Client) Copy(ctx context.Context, src, dst string) error {
	args, err := CopyArgs(src, dst)
	_, err = c.run(ctx, args, err)
	return err
}

// Stop runs `msb stop`.
func (c *Client) Stop(ctx context.Context, o StopOptions) error {
	args, err := o.Args()
	_, err = c.run(ctx, args, err)
	return err
}

// Modify runs `msb modify`.
func (c *Client) Modify(ctx context.Context, o ModifyOptions) error {
	args, err := o.Args()
	_, err = c.run(ctx, args, err)
	return err
}

// Start runs `msb start`.
func (c *Client) Start(ctx context.Context, names ...string) error {
	args, err := StartArgs(names...)
	_, err = c.run(ctx, args, err)
	return err
}

// Remove runs `msb remove`.
func (c *Client) Remove(ctx context.Context, o RemoveOptions) error {
	args, err := o.Args()
	_, err = c.run(ctx, args, err)
	return err
}

// List runs `msb list --format json` and parses it.
func (c *Client) List(ctx context.Context, o ListOptions) ([]Sandbox, error) {
	args, err := o.Args()
	res, err := c.run(ctx, args, err)
	if err != nil {
		return nil, err
	}
	return ParseList(res.Stdout)
}

// Inspect runs `msb inspect NAME --format json` and parses it.
func (c *Client) Inspect(ctx context.Context, name string) (*SandboxInfo, error) {
	args, err := InspectArgs(name)
	res, err := c.run(ctx, args, err)
	if err != nil {
		return nil, err
	}
	info, err := ParseInspect(res.Stdout)
	if err == nil && info.Name != name {
		return nil, fmt.Errorf("%w: msb inspect %s described sandbox %q", ErrMalformedOutput, name, info.Name)
	}
	return info, err
}

// VolumeCreate runs `msb volume create`.
func (c *Client) VolumeCreate(ctx context.Context, o VolumeCreateOptions) error {
	args, err := o.Args()
	_, err = c.run(ctx, args, err)
	return err
}

// VolumeRemove runs `msb volume remove`.
func (c *Client) VolumeRemove(ctx context.Context, names ...string) error {
	args, err := VolumeRemoveArgs(names...)
	_, err = c.run(ctx, args, err)
	return err
}

// VolumeList runs `msb volume list --format json` and parses it.
func (c *Client) VolumeList(ctx context.Context) ([]Volume, error) {
	res, err := c.run(ctx, VolumeListArgs(), nil)
	if err != nil {
		return nil, err
	}
	return ParseVolumeList(res.Stdout)
}

// VolumeInspect runs `msb volume inspect V` and returns its text with
// escape sequences stripped. msb has no JSON form of it.
func (c *Client) VolumeInspect(ctx context.Context, name string) (string, error) {
	args, err := VolumeInspectArgs(name)
	res, err := c.run(ctx, args, err)
	if err != nil {
		return "", err
	}
	return StripANSI(string(res.Stdout)), nil
}
