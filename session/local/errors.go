package local

import (
	"errors"
	"fmt"

	"github.com/oma-sandbox/oma-sandbox/session"
)

// Errors of this backend, beside the shared ones in package session.
var (
	// ErrUnavailable reports that the host cannot prove a control the
	// policy needs; nothing was spawned.
	ErrUnavailable = errors.New("sandbox control unavailable")
	// ErrPathEscape reports a path that leaves the root it was jailed to.
	// It also matches session.ErrInvalid.
	ErrPathEscape = errors.New("path escapes the sandbox")
)

// PolicyError reports a policy, limit or option value refused before
// anything was created. It matches session.ErrInvalid.
type PolicyError struct {
	Field  string // e.g. "mode", "limit memory", "workdir"
	Value  string
	Reason string
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("local sandbox: %s %q refused: %s", e.Field, e.Value, e.Reason)
}

func (e *PolicyError) Is(target error) bool { return target == session.ErrInvalid }

// UnavailableError reports a control the policy needs that the host's
// probes could not prove. It matches ErrUnavailable.
type UnavailableError struct {
	Control string // filesystem, network, process, resources, or a limit name
	Reason  string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("local sandbox refused: %s control unavailable: %s", e.Control, e.Reason)
}

func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// EscapeError reports a path outside its root. It matches ErrPathEscape and
// session.ErrInvalid.
type EscapeError struct {
	Path   string
	Root   string
	Reason string
}

func (e *EscapeError) Error() string {
	return fmt.Sprintf("local sandbox: path %q refused: %s (root %s)", e.Path, e.Reason, e.Root)
}

func (e *EscapeError) Is(target error) bool {
	return target == ErrPathEscape || target == session.ErrInvalid
}
