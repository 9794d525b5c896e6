package transfer

import "time"

// SetDeadlines shortens a transfer's deadlines for a test; the returned
// function restores them.
func SetDeadlines(stall, base time.Duration) (restore func()) {
	oldStall, oldBase := stallTimeout, baseTimeout
	stallTimeout, baseTimeout = stall, base
	return func() { stallTimeout, baseTimeout = oldStall, oldBase }
}
