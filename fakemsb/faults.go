//go:build linux

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// faultRule is one parsed rule of FAKEMSB_FAULTS.
type faultRule struct {
	command string
	nth     int // 0: every invocation
	kind    string
	code    int
	msg     string
	n       int
	delay   time.Duration
}

func parseFaults(spec string) ([]faultRule, error) {
	var rules []faultRule
	for _, raw := range strings.Split(spec, ";") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		lhs, action, ok := strings.Cut(raw, "=")
		if !ok {
			return nil, fmt.Errorf("rule %q: expected COMMAND[#N]=ACTION", raw)
		}
		r := faultRule{command: strings.TrimSpace(lhs)}
		if c, n, ok := strings.Cut(r.command, "#"); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("rule %q: #N must be a positive integer", raw)
			}
			r.command, r.nth = c, v
		}
		if a, ok := aliases[r.command]; ok {
			r.command = a
		}
		if !knownCommand(strings.Replace(r.command, "-", " ", 1)) {
			return nil, fmt.Errorf("rule %q: unknown command %q", raw, r.command)
		}
		kind, arg, _ := strings.Cut(action, ":")
		r.kind = kind
		switch kind {
		case "hang", "malformed":
			if arg != "" {
				return nil, fmt.Errorf("rule %q: %s takes no argument", raw, kind)
			}
		case "exit":
			code, msg, _ := strings.Cut(arg, ":")
			v, err := strconv.Atoi(code)
			if err != nil || v < 0 || v > 255 {
				return nil, fmt.Errorf("rule %q: exit code must be 0..255", raw)
			}
			r.code, r.msg = v, msg
		case "die-after":
			v, err := strconv.Atoi(arg)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("rule %q: die-after needs a byte count", raw)
			}
			r.n = v
		case "delay":
			d, err := time.ParseDuration(arg)
			if err != nil || d < 0 {
				return nil, fmt.Errorf("rule %q: delay needs a duration such as 2s", raw)
			}
			r.delay = d
		default:
			return nil, fmt.Errorf("rule %q: unknown action %q (want exit, hang, malformed, die-after or delay)", raw, kind)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// fault counts this invocation of command and returns the fault rule that
// applies to it, if any.
func (a *app) fault(command string) (*faultRule, error) {
	spec := os.Getenv("FAKEMSB_FAULTS")
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	rules, err := parseFaults(spec)
	if err != nil {
		return nil, &exitError{code: 2, msg: errorf("FAKEMSB_FAULTS: %v", err)}
	}
	count := 0
	for _, r := range rules {
		if r.command == command && r.nth != 0 {
			count = -1
		}
	}
	if count == -1 {
		err := a.withState(func(st *state) error {
			if st.FaultSpec != spec {
				st.FaultSpec, st.FaultCounts = spec, map[string]int{}
			}
			if st.FaultCounts == nil {
				st.FaultCounts = map[string]int{}
			}
			st.FaultCounts[command]++
			count = st.FaultCounts[command]
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for i, r := range rules {
		if r.command == command && (r.nth == 0 || r.nth == count) {
			return &rules[i], nil
		}
	}
	return nil, nil
}
