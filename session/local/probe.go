package local

import "context"

// probeRequest says what to probe: the isolation controls always, limits
// as the policy needs them, or everything for a report.
type probeRequest struct {
	bwrap  string
	limits Limits
	all    bool
}

// Probe reports what this host can enforce, for an operator's doctor
// command: each control is proven by running a real sandbox and checking
// what it lets through, and each Control says why when it falls short.
func Probe(ctx context.Context) Capabilities {
	c, _ := probeHost(ctx, probeRequest{all: true})
	return c
}
