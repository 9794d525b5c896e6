package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// The agent starts once per call on msb's one exec per call and in a
// sandbox per call: it links no regular expression package, whose code
// made it 250 KB larger and slower to start (see guestagent.isHexID).
func TestLinksNoRegexp(t *testing.T) {
	assert.Empty(t, testutil.Linked(t, "regexp"), "the agent links these")
}
