package glob

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Cases no other test reached (found by mutation testing, docs/TESTING.md).

// DEL is a control character too: a path holding it is quoted.
func TestDisplayQuotesDEL(t *testing.T) {
	assert.Equal(t, `"a\x7fb"`, Display("a\x7fb"))
	assert.Equal(t, "a~b", Display("a~b"))
}

// A result outside Base but sharing part of its path climbs only past the
// parts they do not share.
func TestRelativeToSharedPrefix(t *testing.T) {
	for _, c := range []struct{ base, target, want string }{
		{"/workspace/a/b", "/workspace/c", "../../c"},
		{"/workspace/a/b", "/workspace/a/c/d", "../c/d"},
		{"/workspace/a", "/other", "../../other"},
		{"/", "/workspace/x", "workspace/x"},
		{"/workspace", "/workspace", "."},
	} {
		assert.Equal(t, c.want, relativeTo(c.base, c.target), "%s from %s", c.target, c.base)
	}
}
