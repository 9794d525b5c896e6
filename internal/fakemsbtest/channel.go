package fakemsbtest

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
)

// AgentGuestPath is where oma-sandbox places its guest agent.
const AgentGuestPath = "/.oma-sandbox/agent"

// ChannelProcs are the host processes of a sandbox's guest-agent channels
// on this Env: the `msb exec --stream ... NAME -- /.oma-sandbox/agent
// serve` processes (fakemsb, as the wrapper execs it) and the agents they
// run inside the sandbox. Kill one of them to kill a channel.
type ChannelProcs struct {
	Msb    []int
	Agents []int
}

// Empty reports whether no channel process runs.
func (p ChannelProcs) Empty() bool { return len(p.Msb) == 0 && len(p.Agents) == 0 }

// Channel lists sandbox's channel processes that are running now.
func (e *Env) Channel(sandbox string) ChannelProcs {
	type proc struct {
		ppid int
		args []string
	}
	procs := map[int]proc{}
	eachLiveProc(func(pid int, args []string) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || i < 0 {
			return
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			return
		}
		ppid, _ := strconv.Atoi(f[1])
		procs[pid] = proc{ppid: ppid, args: args}
	})
	var out ChannelProcs
	for pid, p := range procs {
		a := p.args
		if a[0] == e.Fakemsb && len(a) > 2 && a[1] == "exec" && slices.Contains(a, "--stream") &&
			slices.Contains(a, sandbox) && slices.Contains(a, AgentGuestPath) {
			environ, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
			if slices.Contains(strings.Split(string(environ), "\x00"), "FAKEMSB_HOME="+e.Home) {
				out.Msb = append(out.Msb, pid)
			}
		}
	}
	for pid, p := range procs {
		if p.args[0] != AgentGuestPath || len(p.args) < 2 || p.args[1] != "serve" {
			continue
		}
		// The agent descends from its msb exec (nsenter, setpriv).
		for up, n := p.ppid, 0; up > 1 && n < 16; up, n = procs[up].ppid, n+1 {
			if slices.Contains(out.Msb, up) {
				out.Agents = append(out.Agents, pid)
				break
			}
		}
	}
	slices.Sort(out.Msb)
	slices.Sort(out.Agents)
	return out
}

// KillChannel SIGKILLs sandbox's channel processes on this Env: the
// agents when agents is true, else their msb exec processes. It returns
// how many it killed.
func (e *Env) KillChannel(sandbox string, agents bool) int {
	procs := e.Channel(sandbox)
	pids := procs.Msb
	if agents {
		pids = procs.Agents
	}
	for _, pid := range pids {
		killPid(pid)
	}
	return len(pids)
}
