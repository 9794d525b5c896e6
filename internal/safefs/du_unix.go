//go:build unix

package safefs

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// SizeOf sums the sizes of the regular files below the host directory dir,
// whose names are the guest's. It walks from directory descriptors, each
// directory opened once from its parent without following a symlink (or,
// on Linux, crossing a mount) and left through "..", checked against the
// identity recorded on the way down, so its cost is linear in the entries
// however deep the tree, and it holds three descriptors at most. Entries
// that vanish or that it may not read are skipped; a directory moved
// while it walks is an error, and so is ctx ending.
func SizeOf(ctx context.Context, dir string) (int64, error) {
	cur, err := unix.Open(dir, dirFlags, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer func() { unix.Close(cur) }()
	curID, err := identOf(cur)
	if err != nil {
		return 0, err
	}
	type level struct {
		names []string
		next  int
		id    ident
	}
	names, err := readNames(cur)
	if err != nil {
		return 0, err
	}
	stack := []level{{names: names, id: curID}}
	var total int64
	for len(stack) > 0 {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("measuring %s: %w", dir, err)
		}
		top := &stack[len(stack)-1]
		if top.next == len(top.names) {
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				break
			}
			up, upID, err := openParent(cur)
			if err == nil && upID != stack[len(stack)-1].id {
				unix.Close(up)
				err = errors.New("a directory moved while being measured")
			}
			if err != nil {
				return 0, fmt.Errorf("measuring %s: %w", dir, err)
			}
			unix.Close(cur)
			cur = up
			continue
		}
		name := top.names[top.next]
		top.next++
		var st unix.Stat_t
		if err := unix.Fstatat(cur, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone since the listing
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			total += st.Size
		case unix.S_IFDIR:
			child, err := openNoFollow(cur, name)
			if err != nil {
				continue // swapped, unreadable, or another mount
			}
			childID, err := identOf(child)
			var names []string
			if err == nil {
				names, err = readNames(child)
			}
			if err != nil {
				unix.Close(child)
				continue
			}
			unix.Close(cur)
			cur = child
			stack = append(stack, level{names: names, id: childID})
		}
	}
	return total, nil
}

func identOf(fd int) (ident, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return ident{}, err
	}
	return identOfStat(&st), nil
}

func identOfStat(st *unix.Stat_t) ident {
	return ident{uint64(st.Dev), uint64(st.Ino)}
}

// readNames lists the directory fd without moving fd's own offset: it
// reads through a duplicate opened afresh.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", dirFlags, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}
