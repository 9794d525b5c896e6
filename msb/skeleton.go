package msb

import "context"

// SKELETON bodies: replaced by the implementation. Signatures are the contract.

func (e *ValidationError) Error() string                           { panic("unimplemented") }
func (e *ValidationError) Is(t error) bool                         { return t == ErrInvalid }
func (e *ExitError) Error() string                                 { panic("unimplemented") }
func (e *ExitError) Unwrap() error                                 { return e.Kind }
func (c *CLI) Run(ctx context.Context, call Call) (*Result, error) { panic("unimplemented") }

// ValidateName checks a sandbox or volume name (1..128 bytes, [A-Za-z0-9][A-Za-z0-9._-]*).
func ValidateName(field, name string) error { panic("unimplemented") }

// Argv builders: each validates and returns the full argv after "msb".
func (o CreateOptions) Args() ([]string, error)          { panic("unimplemented") }
func (o ExecOptions) Args() ([]string, error)            { panic("unimplemented") }
func CopyArgs(src, dst string) ([]string, error)         { panic("unimplemented") }
func PathRef(name, guestPath string) (string, error)     { panic("unimplemented") } // NAME:/abs/path
func (o StopOptions) Args() ([]string, error)            { panic("unimplemented") }
func StartArgs(names ...string) ([]string, error)        { panic("unimplemented") }
func (o RemoveOptions) Args() ([]string, error)          { panic("unimplemented") }
func (o ListOptions) Args() ([]string, error)            { panic("unimplemented") }
func InspectArgs(name string) ([]string, error)          { panic("unimplemented") }
func (o VolumeCreateOptions) Args() ([]string, error)    { panic("unimplemented") }
func VolumeRemoveArgs(names ...string) ([]string, error) { panic("unimplemented") }
func VolumeListArgs() []string                           { panic("unimplemented") }
func VolumeInspectArgs(name string) ([]string, error)    { panic("unimplemented") }

// Parsers.
func ParseList(data []byte) ([]Sandbox, error)       { panic("unimplemented") }
func ParseInspect(data []byte) (*SandboxInfo, error) { panic("unimplemented") }
func ParseVolumeList(data []byte) ([]Volume, error)  { panic("unimplemented") }

// Client methods.
func NewClient(r Runner) *Client                                    { return &Client{Runner: r} }
func (c *Client) Create(ctx context.Context, o CreateOptions) error { panic("unimplemented") }
func (c *Client) Exec(ctx context.Context, o ExecOptions, s Streams) (*Result, error) {
	panic("unimplemented")
}
func (c *Client) Copy(ctx context.Context, src, dst string) error            { panic("unimplemented") }
func (c *Client) Stop(ctx context.Context, o StopOptions) error              { panic("unimplemented") }
func (c *Client) Start(ctx context.Context, names ...string) error           { panic("unimplemented") }
func (c *Client) Remove(ctx context.Context, o RemoveOptions) error          { panic("unimplemented") }
func (c *Client) List(ctx context.Context, o ListOptions) ([]Sandbox, error) { panic("unimplemented") }
func (c *Client) Inspect(ctx context.Context, name string) (*SandboxInfo, error) {
	panic("unimplemented")
}
func (c *Client) VolumeCreate(ctx context.Context, o VolumeCreateOptions) error {
	panic("unimplemented")
}
func (c *Client) VolumeRemove(ctx context.Context, names ...string) error { panic("unimplemented") }
func (c *Client) VolumeList(ctx context.Context) ([]Volume, error)        { panic("unimplemented") }
func (c *Client) VolumeInspect(ctx context.Context, name string) (string, error) {
	panic("unimplemented")
}
