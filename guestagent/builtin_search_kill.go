//go:build linux

package guestagent

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
)

// searchKillPatience is how long searchKill goes on finding tagged
// processes before it gives up.
const searchKillPatience = 2500 * time.Millisecond

// searchKillSignal is signalSame, and a test's processes that outlast
// every scan: ones that keep coming cannot be timed to on a loaded host.
var searchKillSignal = signalSame

// searchKill ends a search's guest work (see glob.CleanupArgs). Its args:
// the tag's name (a glob's or a grep's) and the call's token. It kills
// every process tagged NAME=TOKEN and every process of its group, each
// only while it is still the process the scan found (a recycled pid is
// spared), and scans again until none is left; when some remain after
// searchKillPatience, or the call is killed, it names them and exits 1.
func searchKill(c *builtinCall) int {
	if len(c.Args) != 2 {
		return c.badArgs(agentwire.BuiltinSearchKill, 2)
	}
	name, token := c.Args[0], c.Args[1]
	if name != globOwnerEnv && name != grepOwnerEnv || token == "" || strings.ContainsRune(token, 0) {
		fmt.Fprintf(c.Stderr, "oma-sandbox: malformed search cleanup request: %q\n", c.Args)
		return 2
	}
	entry := name + "=" + token
	deadline := time.Now().Add(searchKillPatience)
	for {
		// Start times read before the tags: a pid taken by another
		// process since then is not signalled.
		ps := scanProcs()
		pids := taggedWith(entry)
		if len(pids) == 0 {
			return 0
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(c.Stderr, "processes tagged %s remain: %v\n", token, pids)
			return 1
		}
		for _, pid := range pids {
			leader, ok := ps[pid]
			if !ok {
				continue // started after the scan: the next one finds it
			}
			searchKillSignal(pid, leader.start, syscall.SIGKILL)
			if leader.pgrp != pid {
				continue
			}
			for member, st := range ps {
				if st.pgrp == pid {
					searchKillSignal(member, st.start, syscall.SIGKILL)
				}
			}
		}
		if !killWait(c.Killed) {
			fmt.Fprintf(c.Stderr, "processes tagged %s remain: %v\n", token, pids)
			return 1
		}
	}
}
