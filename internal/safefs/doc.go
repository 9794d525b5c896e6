// Package safefs removes and copies directory trees that a sandboxed guest
// wrote and may still be changing. The path given to RemoveAll is the host's own;
// every name below it is the guest's, so removal never follows a symlink,
// never crosses into another mount, and never acts by path on a name the
// guest could rename: it works from directory file descriptors, one level
// at a time, with a bounded number of them open whatever the depth.
package safefs

import "errors"

// ErrCopyBudget means a copy would write more file data than its budget.
var ErrCopyBudget = errors.New("copy over its byte budget")

// ErrMoved means a directory was moved while a copy was below it.
var ErrMoved = errors.New("a directory moved while being copied")
