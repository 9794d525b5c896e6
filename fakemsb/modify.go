//go:build linux

package main

import (
	"fmt"
	"strconv"
	"strings"
)

// resources are a sandbox's CPUs and memory: the configured ones, or
// (sandbox.Booted) those of the running guest.
type resources struct {
	CPUs         int `json:"cpus"`
	MemoryMiB    int `json:"memory_mib"`
	MaxCPUs      int `json:"max_cpus"`
	MaxMemoryMiB int `json:"max_memory_mib"`
}

// configured is what the next start boots with: each maximum is at least
// its value, as msb keeps it.
func (sb *sandbox) configured() resources {
	return resources{sb.CPUs, sb.MemoryMiB, max(sb.MaxCPUs, sb.CPUs), max(sb.MaxMemoryMiB, sb.MemoryMiB)}
}

// pendingChange is one entry of inspect's pending_changes: a resource the
// running guest has otherwise than its next start will (a `modify
// --next-start`), worded as msb words it.
type pendingChange struct {
	Field   string `json:"field"`
	Active  string `json:"active"`
	Desired string `json:"desired"`
	Effect  string `json:"effect"`
}

// pendingChanges compares a running guest's resources with its configured
// ones, in msb's order: cpus, max_cpus, memory, max_memory.
func pendingChanges(active, desired resources) []pendingChange {
	out := []pendingChange{}
	add := func(field, a, d string) {
		if a != d {
			out = append(out, pendingChange{field, a, d, "requires restart"})
		}
	}
	add("cpus", strconv.Itoa(active.CPUs), strconv.Itoa(desired.CPUs))
	add("max_cpus", strconv.Itoa(active.MaxCPUs), strconv.Itoa(desired.MaxCPUs))
	add("memory", formatMiB(active.MemoryMiB), formatMiB(desired.MemoryMiB))
	add("max_memory", formatMiB(active.MaxMemoryMiB), formatMiB(desired.MaxMemoryMiB))
	return out
}

// change is one resource a modify asks for, as msb words it.
type change struct {
	field         string
	before, after string
	live          bool // a running guest takes it without a restart
}

// modify models `msb modify NAME [--cpus N] [--memory SIZE]
// [--next-start | --restart]` as msb 0.6.18 plans it: a stopped sandbox
// takes every change at its next start; a running one takes a change live
// when the booted guest's maximum has room for it, and otherwise only with
// --restart (restarted now) or --next-start (saved, the guest untouched),
// else msb refuses the whole modify. Other modify flags are not modelled.
func (a *app) modify(p *parsed) error {
	s := p.spec
	if p.has("next-start") && p.has("restart") {
		return s.usageError("the argument '--next-start' cannot be used with '--restart'")
	}
	name := p.arg("NAME")
	cpus, memMiB := -1, -1
	if p.has("cpus") {
		v := p.str("cpus")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return s.invalidFlag("cpus", v, intError(v, err))
		}
		if n > 255 {
			return s.invalidFlag("cpus", v, fmt.Sprintf("%d is not in 0..=255", n))
		}
		cpus = int(n)
	}
	if p.has("memory") {
		n, err := parseSizeMiB(p.str("memory"))
		if err != nil {
			return failf("invalid size (expected e.g. 512M, 1G): invalid digit found in string")
		}
		memMiB = n
	}
	var restarted bool
	err := a.withState(func(st *state) error {
		sb, err := st.get(name)
		if err != nil {
			return err
		}
		if cpus == 0 {
			return failf("cannot modify %q\n  → cpus must be greater than 0\n  → no changes were applied", name)
		}
		want := sb.configured()
		if cpus > 0 {
			want.CPUs, want.MaxCPUs = cpus, max(want.MaxCPUs, cpus)
		}
		if memMiB > 0 {
			want.MemoryMiB, want.MaxMemoryMiB = memMiB, max(want.MaxMemoryMiB, memMiB)
		}
		changes := planResources(sb.configured(), want, sb.Booted)
		if len(changes) == 0 {
			return nil
		}
		running := sb.Status == statusRunning
		var blocked []string
		for _, c := range changes {
			if running && !c.live {
				blocked = append(blocked, c.field+" requires restart: "+c.before+" -> "+c.after)
			}
		}
		if len(blocked) > 0 && !p.has("restart") && !p.has("next-start") {
			replay := strings.Join(replayArgs(p), " ") + " "
			return failf("cannot modify %q without a restart\n  → %s\n  → no changes were applied\n  → run `msb modify %s %s--restart` to apply now\n  → run `msb modify %s %s--next-start` to save for the next start",
				name, strings.Join(blocked, "\n  → "), name, replay, name, replay)
		}
		sb.CPUs, sb.MemoryMiB, sb.MaxCPUs, sb.MaxMemoryMiB = want.CPUs, want.MemoryMiB, want.MaxCPUs, want.MaxMemoryMiB
		sb.UpdatedAt = a.now
		switch {
		case !running || p.has("next-start"):
		case len(blocked) > 0:
			sb.Holder.kill()
			sb.Holder, sb.Booted = nil, nil
			if err := a.startHolder(sb, st); err != nil {
				sb.Status = statusStopped
				return err
			}
			restarted = true
		default:
			sb.Booted.CPUs, sb.Booted.MemoryMiB = want.CPUs, want.MemoryMiB
		}
		return nil
	})
	if err != nil {
		return err
	}
	target := name
	if p.has("next-start") {
		target += " (next start)"
	}
	a.progress(p, "Modified", target)
	if restarted {
		a.progress(p, "Restarted", name)
	}
	return nil
}

// planResources lists what changes from have to want, in msb's order,
// each live when the booted guest's maximum holds it.
func planResources(have, want resources, booted *resources) []change {
	var out []change
	add := func(field string, before, after int, format func(int) string, live bool) {
		if before != after {
			out = append(out, change{field, format(before), format(after), live})
		}
	}
	fits := func(v func(resources) int, limit func(resources) int) bool {
		return booted != nil && v(want) <= limit(*booted)
	}
	add("cpus", have.CPUs, want.CPUs, strconv.Itoa, fits(func(r resources) int { return r.CPUs }, func(r resources) int { return r.MaxCPUs }))
	add("max_cpus", have.MaxCPUs, want.MaxCPUs, strconv.Itoa, false)
	add("memory", have.MemoryMiB, want.MemoryMiB, formatMiB, fits(func(r resources) int { return r.MemoryMiB }, func(r resources) int { return r.MaxMemoryMiB }))
	add("max_memory", have.MaxMemoryMiB, want.MaxMemoryMiB, formatMiB, false)
	return out
}

// replayArgs renders the resource flags as msb repeats them in its hints.
func replayArgs(p *parsed) []string {
	var out []string
	for _, f := range []string{"cpus", "memory"} {
		if p.has(f) {
			out = append(out, "--"+f+" "+p.str(f))
		}
	}
	return out
}
