package safefs

import "os"

// RemoveAll removes path and everything below it. Windows sessions run
// through a broker that confines the guest to its directories; os.RemoveAll
// does not follow reparse points.
func RemoveAll(path string) error { return os.RemoveAll(path) }
