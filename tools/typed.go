package tools

import (
	"context"
	"encoding/json"
	"fmt"
)

// Found is a glob or grep result in typed form, beside the text Call
// returns for the same input.
type Found struct {
	// Paths are the matches as the text lists them: relative to the
	// workspace for a glob without an absolute path, else absolute.
	Paths []string
	// Truncated reports that more paths match than were kept.
	Truncated bool
	// Skipped names what could not be searched, as the guest said it.
	Skipped []string
	Text    string
}

// foundKey carries, in a call's context, where runSearch leaves its result.
type foundKey struct{}

// keepFound hands r to the CallSearch waiting on ctx, if any.
func keepFound(ctx context.Context, r *searchResult) *searchResult {
	if dst, ok := ctx.Value(foundKey{}).(**searchResult); ok {
		*dst = r
	}
	return r
}

// CallSearch runs the glob or grep tool exactly as Call does and returns its
// result with the paths apart from the text.
func (t *Toolbox) CallSearch(ctx context.Context, name string, input json.RawMessage) (*Found, error) {
	if name != "glob" && name != "grep" {
		return nil, fmt.Errorf("%w: %q is not a search tool (glob, grep)", ErrUnknownTool, name)
	}
	var r *searchResult
	text, err := t.Call(context.WithValue(ctx, foundKey{}, &r), name, input, nil)
	if err != nil {
		return nil, err
	}
	f := &Found{Paths: []string{}, Text: text}
	if r != nil {
		f.Paths = append(f.Paths, r.matches...)
		f.Truncated, f.Skipped = r.truncated, r.skipped
	}
	return f, nil
}

// Is makes a write or edit that the guest refused because its path resolves
// outside the workspace (a symbolic link out) match ErrPathEscape, as a
// path refused before anything ran does.
func (e *GuestError) Is(target error) bool {
	return target == ErrPathEscape && (e.Tool == "write" || e.Tool == "edit") && e.ExitCode == outsideExit
}
