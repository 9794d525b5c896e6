package safefs

import "os"

// RemoveAll removes path and everything below it. No sandbox runs on
// Windows; os.RemoveAll does not follow reparse points.
func RemoveAll(path string) error { return os.RemoveAll(path) }
