//go:build linux

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	defaultCPUs      = 1
	defaultMemoryMiB = 512
)

func (a *app) create(p *parsed) error {
	s := p.spec
	sb := &sandbox{
		Image:       p.arg("IMAGE"),
		Labels:      map[string]string{},
		CPUs:        defaultCPUs,
		MemoryMiB:   defaultMemoryMiB,
		Workdir:     p.str("workdir"),
		ImageConfig: a.image,
		Security:    "default",
		Pull:        "if-missing",
		Status:      statusRunning,
		CreatedAt:   a.now,
		UpdatedAt:   a.now,
		Mounts:      []namedMount{},
		Tmpfs:       []tmpfsMount{},
	}
	// msb checks values after parsing the command line: its refusals are
	// msb-side errors, exit 1, except the integer flags clap parses. It
	// reads --copy-file sources before it checks the name.
	for _, v := range p.vals["copy-file"] {
		f, err := parseCopyFile(v)
		if err != nil {
			return err
		}
		if err := checkCopyDst(f.Dst); err != nil {
			return err
		}
		sb.CopyFiles = append(sb.CopyFiles, *f)
	}
	snapName, err := confSource(p, sb)
	if err != nil {
		return err
	}
	name := p.str("name")
	if p.has("name") {
		if err := checkSandboxName(name); err != nil {
			return err
		}
	}
	if err := sb.setNetwork(p); err != nil {
		return err
	}
	for _, v := range p.vals["mount-named"] {
		m, err := parseNamedMount(v)
		if err != nil {
			return failf("%v", err)
		}
		sb.Mounts = append(sb.Mounts, m)
	}
	for _, v := range p.vals["port"] {
		m, err := parsePort(v)
		if err != nil {
			return err
		}
		sb.Ports = append(sb.Ports, m)
	}
	for _, v := range p.vals["tmpfs"] {
		m, err := parseTmpfs(v)
		if err != nil {
			return failf("%v", err)
		}
		sb.Tmpfs = append(sb.Tmpfs, m)
	}
	if p.has("cpus") {
		v := p.str("cpus")
		n, err := strconv.ParseUint(v, 10, 8)
		if err != nil {
			return s.invalidFlag("cpus", v, intError(v, err))
		}
		if n == 0 {
			return s.invalidFlag("cpus", v, "cpus must be at least 1")
		}
		sb.CPUs = int(n)
	}
	sizes := []struct {
		flag string
		dst  *int
	}{{"memory", &sb.MemoryMiB}, {"root-disk", &sb.RootDiskMiB}, {"oci-upper-size", &sb.RootDiskMiB}}
	for _, f := range sizes {
		if !p.has(f.flag) {
			continue
		}
		n, err := parseSizeMiB(p.str(f.flag))
		if err != nil && f.flag != "memory" {
			return failf("--%s: %v (expected a size, tmpfs[:SIZE], flat[:SIZE][,OPTIONS], or an image path)", f.flag, err)
		}
		if err != nil {
			return failf("%v", err)
		}
		*f.dst = n
	}
	if p.has("root-disk") && p.has("oci-upper-size") {
		return s.usageError("the argument '--root-disk <SIZE>' cannot be used with '--oci-upper-size <SIZE>'")
	}
	durations := []struct {
		flag string
		dst  **int64
	}{{"max-duration", &sb.MaxDurationSecs}, {"idle-timeout", &sb.IdleTimeoutSecs}}
	for _, f := range durations {
		if !p.has(f.flag) {
			continue
		}
		n, err := parseDurationSecs(p.str(f.flag))
		if err != nil {
			return failf("%v", err)
		}
		*f.dst = &n
	}
	if err := p.oneOf("security", "default", "restricted"); err != nil {
		return err
	}
	if err := p.oneOf("pull", "always", "if-missing", "never"); err != nil {
		return err
	}
	if p.has("security") {
		sb.Security = p.str("security")
	}
	if p.has("pull") {
		sb.Pull = p.str("pull")
	}
	for _, l := range p.vals["label"] {
		k, v := parseLabel(l)
		if err := checkLabelKey(k); err != nil {
			return err
		}
		sb.Labels[k] = v
	}
	if snapName != "" {
		if err := a.bootFromSnapshot(sb, snapName); err != nil {
			return err
		}
	} else if sb.Pull == "never" && !imageCached(sb.Image) {
		return failf("image error: image not cached: %s", qualifiedRef(sb.Image))
	}
	generated := name == ""
	if generated {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name = fmt.Sprintf("msb-%08x", binary.BigEndian.Uint32(b[:]))
	}
	sb.Name = name
	err = a.withState(func(st *state) error {
		if old, ok := st.Sandboxes[name]; ok {
			if !p.has("replace") {
				return failf("sandbox already exists: sandbox '%s' already exists; remove it, start the stopped sandbox, or recreate with .replace()", name)
			}
			old.Holder.kill()
			delete(st.Sandboxes, name)
			a.removeEgress(name)
			a.removePatches(name)
		}
		if err := a.saveSecrets(sb); err != nil {
			return failf("io error: secrets: %v", err)
		}
		if err := a.savePatches(sb); err != nil {
			return failf("io error: copy-file: %v", err)
		}
		var made []string
		for _, m := range sb.Mounts {
			if _, ok := st.Volumes[m.Volume]; ok {
				continue
			}
			kind := m.Kind
			if kind == "" {
				kind = "dir"
			}
			if err := a.makeVolume(st, m.Volume, kind, m.SizeMiB); err != nil {
				return err
			}
			made = append(made, m.Volume)
		}
		// msb records a sandbox before it boots and lists it as Starting,
		// so a create killed during the start leaves a record that remove
		// ends, never a process no listing shows.
		sb.Status = statusStarting
		st.Sandboxes[name] = sb
		if err := a.writeState(st, nil); err != nil {
			return err
		}
		if err := a.startHolder(sb, st); err != nil {
			// As msb: a failed start removes the volumes it made with the
			// record, and otherwise keeps the record, stopped.
			sb.Status = statusStopped
			if len(made) > 0 {
				delete(st.Sandboxes, name)
				a.removeEgress(name)
				a.removePatches(name)
				for _, v := range made {
					delete(st.Volumes, v)
					_ = os.RemoveAll(a.volumeDir(v))
				}
			}
			if werr := a.writeState(st, nil); werr != nil {
				return werr
			}
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if generated {
		fmt.Fprintln(a.stdout, name)
	}
	a.progress(p, "Created", name)
	return nil
}

// targets resolves NAMES... plus every sandbox matching all --label filters.
func targets(p *parsed, st *state) []string {
	names := append([]string(nil), p.pos["NAMES"]...)
	if p.has("label") {
		for _, sb := range st.sorted() {
			if sb.matches(p.vals["label"]) && !slices.Contains(names, sb.Name) {
				names = append(names, sb.Name)
			}
		}
	}
	return names
}

func (sb *sandbox) matches(filters []string) bool {
	for _, f := range filters {
		k, v := parseLabel(f)
		if got, ok := sb.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (st *state) sorted() []*sandbox {
	out := make([]*sandbox, 0, len(st.Sandboxes))
	for _, sb := range st.Sandboxes {
		out = append(out, sb)
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

// eachTarget applies fn to every target under the state lock, printing each
// failure and continuing like msb's bulk commands. quietErrors: with -q,
// msb's remove and start print no error either, only the exit code tells.
func (a *app) eachTarget(p *parsed, verb string, quietErrors bool, fn func(st *state, sb *sandbox) error) error {
	if err := p.requireOneOf("NAMES", "label"); err != nil {
		return err
	}
	failed := false
	err := a.withState(func(st *state) error {
		for _, name := range targets(p, st) {
			sb, err := st.get(name)
			if err == nil {
				err = fn(st, sb)
			}
			if err != nil {
				if !quietErrors || !p.has("quiet") {
					a.report(err)
				}
				failed = true
				continue
			}
			a.progress(p, verb, name)
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

func (a *app) stop(p *parsed) error {
	if p.has("timeout") {
		if _, err := strconv.ParseUint(p.str("timeout"), 10, 64); err != nil {
			return p.spec.invalidFlag("timeout", p.str("timeout"), intError(p.str("timeout"), err))
		}
	}
	return a.eachTarget(p, "Stopped", false, func(st *state, sb *sandbox) error {
		a.stopSandbox(sb)
		return nil
	})
}

func (a *app) stopSandbox(sb *sandbox) {
	if sb.Status == statusStopped {
		return
	}
	defer a.took(time.Now())
	sb.Holder.kill()
	sb.Holder, sb.Status, sb.Booted, sb.TransientExecs, sb.UpdatedAt = nil, statusStopped, nil, 0, a.now
}

func (a *app) startCmd(p *parsed) error {
	return a.eachTarget(p, "Started", true, func(st *state, sb *sandbox) error {
		if sb.Status == statusRunning && sb.TransientExecs == 0 {
			return failf("sandbox still running: cannot start sandbox '%s': already running", sb.Name)
		}
		sb.TransientExecs = 0
		if sb.Status == statusRunning {
			return nil // running for an exec only: now for good
		}
		defer a.took(time.Now())
		sb.UpdatedAt = a.now
		return a.startHolder(sb, st)
	})
}

func (a *app) remove(p *parsed) error {
	return a.eachTarget(p, "Removed", true, func(st *state, sb *sandbox) error {
		if sb.Status == statusRunning {
			if !p.has("force") {
				return failf("sandbox still running: cannot remove sandbox '%s': still running", sb.Name)
			}
			sb.Holder.kill()
		}
		delete(st.Sandboxes, sb.Name)
		_ = os.Remove(filepath.Join(a.runDir(), sb.Name+".log"))
		_ = os.Remove(filepath.Join(a.runDir(), sb.Name+".egress.log"))
		a.removeEgress(sb.Name)
		a.removePatches(sb.Name)
		return nil
	})
}

func (a *app) list(p *parsed) error {
	if err := p.oneOf("format", "json"); err != nil {
		return err
	}
	var rows []*sandbox
	err := a.withState(func(st *state) error {
		for _, sb := range st.sorted() {
			if !sb.matches(p.vals["label"]) {
				continue
			}
			// Both filters must hold, so together they match nothing.
			if p.has("running") && sb.Status != statusRunning || p.has("stopped") && sb.Status != statusStopped {
				continue
			}
			rows = append(rows, sb)
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case p.has("format"):
		type entry struct {
			CreatedAt string `json:"created_at"`
			Image     string `json:"image"`
			Name      string `json:"name"`
			Status    string `json:"status"`
		}
		out := []entry{}
		for _, sb := range rows {
			out = append(out, entry{fmtTime(sb.CreatedAt), sb.Image, sb.Name, sb.Status})
		}
		return a.printJSON(out)
	case p.has("quiet"):
		for _, sb := range rows {
			fmt.Fprintln(a.stdout, sb.Name)
		}
	case len(rows) == 0:
		fmt.Fprintln(a.stderr, "No sandboxes found.")
	default:
		t := [][]string{{"NAME", "IMAGE", "STATUS", "CREATED"}}
		for _, sb := range rows {
			t = append(t, []string{sb.Name, sb.Image, strings.ToLower(sb.Status), sb.CreatedAt.Local().Format("2006-01-02 15:04:05")})
		}
		a.printTable(t)
	}
	return nil
}

// printJSON prints v as msb does: pretty-printed with two spaces, keys in
// alphabetical order.
func (a *app) printJSON(v any) error {
	b, err := jsonIndent(v)
	if err != nil {
		return failf("json error: %v", err)
	}
	_, _ = a.stdout.Write(b)
	return nil
}

// jsonIndent renders v with sorted keys, two-space indent, no HTML
// escaping and a final newline.
func jsonIndent(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(tree); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// printTable aligns columns with four spaces between them, like msb.
func (a *app) printTable(rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			if i == len(r)-1 {
				b.WriteString(c)
			} else {
				fmt.Fprintf(&b, "%-*s    ", widths[i], c)
			}
		}
		fmt.Fprintln(a.stdout, b.String())
	}
}

// inspectDoc is `inspect --format json`; field order follows msb.
type inspectDoc struct {
	Name           string          `json:"name"`
	Status         string          `json:"status"`
	CreatedAt      string          `json:"created_at"`
	UpdatedAt      string          `json:"updated_at"`
	ActiveConfig   *sandboxConfig  `json:"active_config"`
	PendingChanges []pendingChange `json:"pending_changes"`
	Config         *sandboxConfig  `json:"config"`
}

type sandboxConfig struct {
	Name  string `json:"name"`
	Image struct {
		Oci struct {
			Reference string `json:"reference"`
			RootDisk  struct {
				Kind    string `json:"kind"`
				SizeMiB *int   `json:"size_mib"`
			} `json:"root_disk"`
		} `json:"Oci"`
	} `json:"image"`
	Resources resources `json:"resources"`
	Runtime   struct {
		Workdir    *string        `json:"workdir"`
		Shell      *string        `json:"shell"`
		Scripts    map[string]any `json:"scripts"`
		Entrypoint []string       `json:"entrypoint"`
		Cmd        []string       `json:"cmd"`
		Hostname   *string        `json:"hostname"`
		User       *string        `json:"user"`
		LogLevel   *string        `json:"log_level"`
	} `json:"runtime"`
	Env             []envVar          `json:"env"`
	Labels          map[string]string `json:"labels"`
	Rlimits         []struct{}        `json:"rlimits"`
	Patches         []patchDoc        `json:"patches"`
	Mounts          []any             `json:"mounts"`
	Network         networkDoc        `json:"network"`
	PullPolicy      string            `json:"pull_policy"`
	SecurityProfile string            `json:"security_profile"`
	Lifecycle       struct {
		Ephemeral       bool   `json:"ephemeral"`
		MaxDurationSecs *int64 `json:"max_duration_secs"`
		IdleTimeoutSecs *int64 `json:"idle_timeout_secs"`
	} `json:"lifecycle"`
}

type envVar struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// workdir is where commands start: create's --workdir, else the image's.
func (sb *sandbox) workdir() string {
	if sb.Workdir != "" {
		return sb.Workdir
	}
	return sb.ImageConfig.Workdir
}

type namedMountDoc struct {
	Type    string       `json:"type"`
	Name    string       `json:"name"`
	Guest   string       `json:"guest"`
	Options mountOptions `json:"options"`
}

type tmpfsMountDoc struct {
	Type    string       `json:"type"`
	Guest   string       `json:"guest"`
	SizeMiB *int         `json:"size_mib"`
	Options mountOptions `json:"options"`
}

var pullPolicies = map[string]string{"always": "Always", "if-missing": "IfMissing", "never": "Never"}

func (sb *sandbox) config() *sandboxConfig {
	c := &sandboxConfig{Name: sb.Name, Labels: sb.Labels, Env: []envVar{}, Rlimits: []struct{}{}, Mounts: []any{}, Patches: []patchDoc{}}
	for _, f := range sb.CopyFiles {
		var d patchDoc
		d.CopyFile.Src, d.CopyFile.Dst = f.Src, f.Dst
		c.Patches = append(c.Patches, d)
	}
	for _, e := range sb.ImageConfig.Env {
		k, v, _ := strings.Cut(e, "=")
		c.Env = append(c.Env, envVar{k, v})
	}
	if u := sb.ImageConfig.User; u != "" {
		c.Runtime.User = &u
	}
	c.Image.Oci.Reference = sb.Image
	c.Image.Oci.RootDisk.Kind = "managed"
	if sb.RootDiskMiB > 0 {
		n := sb.RootDiskMiB
		c.Image.Oci.RootDisk.SizeMiB = &n
	}
	c.Resources = sb.configured()
	if w := sb.workdir(); w != "" {
		c.Runtime.Workdir = &w
	}
	c.Runtime.Scripts = map[string]any{}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	for _, m := range sb.Mounts {
		c.Mounts = append(c.Mounts, namedMountDoc{"Named", m.Volume, m.Guest, m.Options})
	}
	for _, t := range sb.Tmpfs {
		d := tmpfsMountDoc{Type: "Tmpfs", Guest: t.Guest, Options: t.Options}
		if t.SizeMiB > 0 {
			n := t.SizeMiB
			d.SizeMiB = &n
		}
		c.Mounts = append(c.Mounts, d)
	}
	c.Network = sb.networkDoc()
	c.PullPolicy = pullPolicies[sb.Pull]
	c.SecurityProfile = sb.Security
	c.Lifecycle.MaxDurationSecs = sb.MaxDurationSecs
	c.Lifecycle.IdleTimeoutSecs = sb.IdleTimeoutSecs
	return c
}

func (a *app) inspect(p *parsed) error {
	if err := p.oneOf("format", "json"); err != nil {
		return err
	}
	var sb *sandbox
	err := a.withState(func(st *state) error {
		var err error
		sb, err = st.get(p.arg("NAME"))
		return err
	})
	if err != nil {
		return err
	}
	if p.has("format") {
		doc := inspectDoc{
			Name: sb.Name, Status: sb.Status,
			CreatedAt: fmtTime(sb.CreatedAt), UpdatedAt: fmtTime(sb.UpdatedAt),
			PendingChanges: []pendingChange{}, Config: sb.config(),
		}
		if sb.Status == statusRunning {
			doc.ActiveConfig = sb.config()
			if sb.Booted != nil {
				doc.ActiveConfig.Resources = *sb.Booted
			}
			doc.PendingChanges = pendingChanges(doc.ActiveConfig.Resources, doc.Config.Resources)
		}
		return a.printJSON(doc)
	}
	kv := func(k, v string) { fmt.Fprintf(a.stdout, "%-16s%s\n", k+":", v) }
	kv("Name", sb.Name)
	kv("Status", strings.ToLower(sb.Status))
	kv("Image", sb.Image)
	kv("CPUs", strconv.Itoa(sb.CPUs))
	kv("Memory", fmt.Sprintf("%d MiB", sb.MemoryMiB))
	kv("Created", sb.CreatedAt.Local().Format("2006-01-02 15:04:05"))
	var mounts []string
	for _, m := range sb.Mounts {
		mounts = append(mounts, m.Volume+" → "+m.Guest)
	}
	for _, t := range sb.Tmpfs {
		mounts = append(mounts, "tmpfs → "+t.Guest)
	}
	if len(mounts) == 0 {
		mounts = []string{"-"}
	}
	kv("Mounts", strings.Join(mounts, ", "))
	return nil
}
