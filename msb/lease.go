package msb

import (
	"path/filepath"
	"strings"
	"time"
)

// msb opens its database under an exclusive flock of this file, in its
// home's db directory, and only under it takes its "install exclusive"
// lease: a row of the database that makes every msb command refuse for 30
// minutes, cleared a few milliseconds later. An msb killed between the two
// leaves the lease held (msb does not ask whether its holder lives), so
// every kill waits until no msb holds this lock.
const migrationLock = "db/msb.db.migration.lock"

// migrationLockWait bounds that wait: msb holds the lock for tens of
// milliseconds; one that holds it longer is stuck, and is killed anyway.
var migrationLockWait = 5 * time.Second

// migrationLockPath is the lock file of the msb home env names: MSB_HOME,
// else ~/.microsandbox; "" when env names neither.
func migrationLockPath(env []string) string {
	var home, msbHome string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "MSB_HOME="); ok {
			msbHome = v
		} else if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	switch {
	case msbHome != "":
		return filepath.Join(msbHome, migrationLock)
	case home != "":
		return filepath.Join(home, ".microsandbox", migrationLock)
	}
	return ""
}

// installLeaseUntil recognises msb's refusal while its install lease is
// held, `runtime error: microsandbox install operation in progress until
// 2026-12-06 07:34:53.784087508; retry after it completes` (or, from a
// command that lost the race to take it, `another microsandbox install
// operation is in progress until ...`), and returns when the lease expires.
// msb prints the time in UTC without a zone.
func installLeaseUntil(message string) (time.Time, bool) {
	rest := strings.TrimPrefix(message, "runtime error: ")
	rest = strings.TrimPrefix(rest, "another ")
	for _, prefix := range []string{
		"microsandbox install operation in progress until ",
		"microsandbox install operation is in progress until ",
	} {
		if stamp, ok := strings.CutPrefix(rest, prefix); ok {
			stamp, tail, _ := strings.Cut(stamp, ";")
			if tail != "" && tail != " retry after it completes" {
				return time.Time{}, false
			}
			t, err := time.ParseInLocation("2006-01-02 15:04:05.999999999", stamp, time.UTC)
			return t, err == nil && !t.IsZero()
		}
	}
	return time.Time{}, false
}
