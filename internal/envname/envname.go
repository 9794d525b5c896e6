// Package envname tells whether a string may name an environment variable
// that a shell can read: a secret is passed to a sandbox by its variable's
// name, never by its value.
package envname

// Valid reports whether s is a shell variable name: letters, digits and
// underscores, not starting with a digit.
func Valid(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
