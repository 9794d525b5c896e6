//go:build linux

package guestagent

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// identity is the user a call runs as.
type identity struct{ uid, gid uint32 }

// lookupUser resolves spec as msb's --user does: a name or numeric uid,
// optionally followed by ":" and a group name or numeric gid, from the
// guest's own /etc/passwd and /etc/group. A user's primary group comes
// from its passwd entry; a numeric uid without one uses its own number.
func lookupUser(etc, spec string) (identity, error) {
	u, g, hasGroup := strings.Cut(spec, ":")
	if u == "" || (hasGroup && g == "") {
		return identity{}, fmt.Errorf("bad user %q", spec)
	}
	uid, numeric := parseID(u)
	gid := int64(-1)
	found := false
	err := scanDB(etc+"/passwd", func(f []string) bool {
		if len(f) < 4 || (f[0] != u && (!numeric || f[2] != strconv.FormatInt(uid, 10))) {
			return false
		}
		pu, ok1 := parseID(f[2])
		pg, ok2 := parseID(f[3])
		if !ok1 || !ok2 {
			return false
		}
		uid, gid, found = pu, pg, true
		return true
	})
	if err != nil && !numeric {
		return identity{}, err
	}
	if !found && !numeric {
		return identity{}, fmt.Errorf("user not found: %s", u)
	}
	if gid < 0 {
		gid = uid
	}
	if hasGroup {
		n, ok := parseID(g)
		if !ok {
			found = false
			err := scanDB(etc+"/group", func(f []string) bool {
				if len(f) >= 3 && f[0] == g {
					n, found = parseID(f[2])
				}
				return found
			})
			if err != nil {
				return identity{}, err
			}
			if !found {
				return identity{}, fmt.Errorf("group not found: %s", g)
			}
		}
		gid = n
	}
	return identity{uint32(uid), uint32(gid)}, nil
}

func parseID(s string) (int64, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 { // (uid_t)-1 means "no change" to setuid
		return 0, false
	}
	return int64(n), true
}

// scanDB calls match with the fields of each line of a passwd-style file
// until it returns true.
func scanDB(path string, match func([]string) bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if match(strings.Split(sc.Text(), ":")) {
			return nil
		}
	}
	return sc.Err()
}
