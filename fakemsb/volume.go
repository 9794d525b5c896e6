//go:build linux

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/oma-sandbox/oma-sandbox/internal/safefs"
)

// makeVolume creates volume name in st and its directory.
func (a *app) makeVolume(st *state, name, kind string, sizeMiB int) error {
	if _, ok := st.Volumes[name]; ok {
		return failf("volume already exists: %s", name)
	}
	if kind == "disk" && sizeMiB == 0 {
		return failf("invalid config: disk volume %q needs a size", name)
	}
	if err := os.MkdirAll(a.volumeDir(name), 0o755); err != nil {
		if errors.Is(err, syscall.ENAMETOOLONG) {
			return failf("io error: File name too long (os error 36)")
		}
		return failf("io error: %v", err)
	}
	st.Volumes[name] = &volume{Name: name, Kind: kind, SizeMiB: sizeMiB, CreatedAt: a.now}
	return nil
}

func (a *app) volumeCreate(p *parsed) error {
	s := p.spec
	name := p.arg("NAME")
	if p.has("name") {
		if name != "" {
			return s.usageError("the argument '[NAME]' cannot be used with '--name <NAME>'")
		}
		name = p.str("name")
	} else if name == "" {
		return failf("volume create requires a name")
	}
	if err := checkVolumeName(name); err != nil {
		return err
	}
	if err := p.oneOf("kind", "dir", "disk"); err != nil {
		return err
	}
	kind := "dir"
	if p.has("kind") {
		kind = p.str("kind")
	}
	size := 0
	if p.has("size") {
		n, err := parseSizeMiB(p.str("size"))
		if err != nil {
			return failf("%v", err)
		}
		if kind != "disk" {
			return failf("--size is only supported with --kind disk until directory quotas are enforced")
		}
		size = n
	} else if kind == "disk" {
		return failf("--size is required with --kind disk")
	}
	if err := a.withState(func(st *state) error { return a.makeVolume(st, name, kind, size) }); err != nil {
		return err
	}
	if !p.has("quiet") {
		fmt.Fprintln(a.stdout, name)
	}
	return nil
}

func (a *app) volumeRemove(p *parsed) error {
	failed := false
	err := a.withState(func(st *state) error {
		for _, name := range p.pos["NAMES"] {
			if err := a.removeVolume(st, name); err != nil {
				if !p.has("quiet") {
					a.report(err)
				}
				failed = true
				continue
			}
			a.progress(p, "Removed", name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if failed {
		return &exitError{code: 1}
	}
	return nil
}

func (a *app) removeVolume(st *state, name string) error {
	if _, ok := st.Volumes[name]; !ok {
		return failf("volume not found: %s", name)
	}
	for _, sb := range st.sorted() {
		if sb.Status == statusStopped {
			continue
		}
		for _, m := range sb.Mounts {
			if m.Volume == name {
				return failf("invalid config: volume %q is attached to active sandbox %q", name, sb.Name)
			}
		}
	}
	// The guest wrote everything below the volume's directory: removal
	// never follows its links and copes with any depth.
	if err := safefs.RemoveAll(a.volumeDir(name)); err != nil {
		return failf("io error: %v", err)
	}
	delete(st.Volumes, name)
	return nil
}

func (st *state) sortedVolumes() []*volume {
	out := make([]*volume, 0, len(st.Volumes))
	for _, v := range st.Volumes {
		out = append(out, v)
	}
	// Newest first, as msb lists them.
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// usedBytes sums the sizes of the regular files under dir.
func usedBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func (a *app) volumeList(p *parsed) error {
	if err := p.oneOf("format", "json"); err != nil {
		return err
	}
	var vols []*volume
	if err := a.withState(func(st *state) error { vols = st.sortedVolumes(); return nil }); err != nil {
		return err
	}
	switch {
	case p.has("format"):
		type entry struct {
			Name          string  `json:"name"`
			Kind          string  `json:"kind"`
			QuotaMiB      *int    `json:"quota_mib"`
			UsedBytes     int64   `json:"used_bytes"`
			CapacityBytes *int64  `json:"capacity_bytes"`
			DiskFormat    *string `json:"disk_format"`
			DiskFstype    *string `json:"disk_fstype"`
			CreatedAt     string  `json:"created_at"`
		}
		out := []entry{}
		for _, v := range vols {
			e := entry{Name: v.Name, Kind: v.Kind, UsedBytes: usedBytes(a.volumeDir(v.Name)), CreatedAt: fmtTime(v.CreatedAt)}
			if v.Kind == "disk" {
				c, f, t := int64(v.SizeMiB)<<20, "raw", "ext4"
				e.CapacityBytes, e.DiskFormat, e.DiskFstype = &c, &f, &t
			}
			out = append(out, e)
		}
		return a.printJSON(out)
	case p.has("quiet"):
		for _, v := range vols {
			fmt.Fprintln(a.stdout, v.Name)
		}
	case len(vols) == 0:
		fmt.Fprintln(a.stderr, "No volumes found.")
	default:
		t := [][]string{{"NAME", "KIND", "SIZE", "CREATED"}}
		for _, v := range vols {
			size := "-"
			if v.Kind == "disk" {
				size = formatMiB(v.SizeMiB)
			}
			t = append(t, []string{v.Name, v.Kind, size, v.CreatedAt.Local().Format("2006-01-02 15:04:05")})
		}
		a.printTable(t)
	}
	return nil
}

// formatMiB is msb's rendering of a size: whole GiB when it is one.
func formatMiB(mib int) string {
	if mib >= 1024 && mib%1024 == 0 {
		return fmt.Sprintf("%d GiB", mib/1024)
	}
	return fmt.Sprintf("%d MiB", mib)
}

func (a *app) volumeInspect(p *parsed) error {
	name := p.arg("NAME")
	var v *volume
	err := a.withState(func(st *state) error {
		var ok bool
		if v, ok = st.Volumes[name]; !ok {
			return failf("volume not found: %s", name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	kv := func(k, val string) { fmt.Fprintf(a.stdout, "%-16s%s\n", k+":", val) }
	kv("Name", v.Name)
	kv("Kind", v.Kind)
	if v.Kind == "disk" {
		kv("Format", "raw")
		kv("Filesystem", "ext4")
		kv("Capacity", formatMiB(v.SizeMiB))
	} else {
		kv("Quota", "unlimited")
	}
	kv("Path", a.volumeDir(v.Name))
	kv("Created", v.CreatedAt.Local().Format("2006-01-02 15:04:05"))
	kv("Labels", "-")
	return nil
}
