//go:build linux

// Command oma-guest-agent is the agent oma-sandbox places in each msb
// sandbox: `oma-guest-agent serve` answers calls framed on its stdin and
// stdout (docs/guest-agent.md) until its stdin ends.
package main

import (
	"os"

	"github.com/oma-sandbox/oma-sandbox/guestagent"
)

func main() {
	os.Exit(guestagent.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
