package local

import (
	"errors"

	"github.com/oma-sandbox/oma-sandbox/egress"
)

// egress is the policy's network part as the egress package sees it.
func (p Policy) egress() egress.Policy {
	return egress.Policy{Mode: egress.Mode(p.Network), Allow: p.Allow, Secrets: p.Secrets}
}

// validateEgress refuses targets without an allowlist, an allowlist
// without targets, and an allowlist in danger-full-access, which shares
// the host's network whatever Network says.
func (p Policy) validateEgress() error {
	if p.Mode == ModeDangerFullAccess && p.Network == NetworkAllowlist {
		return &PolicyError{Field: "network", Value: string(p.Network), Reason: "danger-full-access shares the host's network, so no allowlist applies"}
	}
	if len(p.Secrets) > 0 && p.Network != NetworkAllowlist {
		// Only the allowlist's proxy can keep a secret's value out of the
		// sandbox; unrestricted has no proxy.
		return &PolicyError{Field: "secret", Value: p.Secrets[0].String(), Reason: "the local backend injects secrets through its allowlist proxy only; give --allow-net targets"}
	}
	err := p.egress().Validate()
	if pe := (*egress.Error)(nil); errors.As(err, &pe) {
		return &PolicyError{Field: pe.Field, Value: pe.Value, Reason: pe.Reason}
	}
	return err
}
