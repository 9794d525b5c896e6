//go:build linux

package guestagent

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The commands' init refuses to run as anything but a namespace's pid 1:
// a command cannot start one of its own to play the part.
func TestCommandsInitRunsOnlyAsPid1(t *testing.T) {
	var stderr strings.Builder
	assert.Equal(t, 2, Main([]string{commandsInitArg}, strings.NewReader(""), io.Discard, &stderr))
	assert.Contains(t, stderr.String(), "commands-init is run by serve --commands-pidns only")
}

// The two ways of keeping out of the commands' reach do not combine.
func TestServeTakesOneWayApart(t *testing.T) {
	var stderr strings.Builder
	assert.Equal(t, 2, Main([]string{"serve", "--userns=2147418112:65534", "--commands-pidns"}, strings.NewReader(""), io.Discard, &stderr))
	assert.Contains(t, stderr.String(), "--userns and --commands-pidns are two ways to keep out of the commands' reach: give one")
	assert.Nil(t, commandsNS)
}
