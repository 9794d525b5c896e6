package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
)

// run names on stderr the session's own notes from the result text, not a
// line of the command's output that looks like one, and a note that does
// not print is quoted.
func TestRunSessionNotes(t *testing.T) {
	out := newStreamed(io.Discard)
	output := "Session limit: said by the command\n"
	out.write([]byte(output))
	text := output + "\n\nSession limit: memory limit of 64 MiB reached: the kernel killed 1 process(es)" +
		"\n\nNetwork: egress refused \x1b[2Jevil:80: not in the allowlist\n\nCommand exited with code 1"
	notes := out.sessionNotes(text)
	assert.Equal(t, []string{
		"Session limit: memory limit of 64 MiB reached: the kernel killed 1 process(es)",
		"Network: egress refused \x1b[2Jevil:80: not in the allowlist",
	}, notes)
	assert.Equal(t, notes[0], printable(notes[0]))
	assert.Equal(t, `"Network: egress refused \x1b[2Jevil:80: not in the allowlist"`, printable(notes[1]))
	assert.Equal(t, `"\xff"`, printable("\xff"))
}
