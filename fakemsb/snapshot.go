//go:build linux

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// snapshot is one `msb snapshot create NAME --from SANDBOX`: the image the
// source booted from and its root disk, which in fakemsb is nothing but
// the files msb had placed there (the source's --copy-file patches, and
// those it inherited from a snapshot itself). Their bytes live in
// snapshotDir(Name); a sandbox booted from it gets its own copy.
type snapshot struct {
	Name        string            `json:"name"`
	Digest      string            `json:"digest"`
	Image       string            `json:"image"`
	ImageConfig imageConfig       `json:"image_config"`
	Source      string            `json:"source"`
	Labels      map[string]string `json:"labels"`
	RootFiles   []copyFile        `json:"root_files,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
}

func (a *app) snapshotDir(name string) string { return filepath.Join(a.home, "snapshots", name) }

// snapshotNotFound is msb's refusal, which names the artifact's path.
func (a *app) snapshotNotFound(name string) error {
	return failf("snapshot not found: %s", a.snapshotDir(name))
}

// checkSnapshotName refuses what msb 0.6.18 refuses for a snapshot name.
func checkSnapshotName(name string) error {
	switch {
	case name == "":
		return failf("invalid config: snapshot name must not be empty")
	case strings.ContainsAny(name, `/\`) || name == "." || name == "..":
		return failf("invalid config: snapshot name must be a bare identifier, not a path: '%s' (use dest_dir to choose a parent directory)", name)
	}
	return nil
}

// snapshotCreate checks in msb's order: the name, an existing artifact,
// the source, its status.
func (a *app) snapshotCreate(p *parsed) error {
	name, from := p.arg("NAME"), p.str("from")
	if err := checkSnapshotName(name); err != nil {
		return err
	}
	var snap *snapshot
	err := a.withState(func(st *state) error {
		if _, ok := st.Snapshots[name]; ok && !p.has("force") {
			return failf("snapshot already exists: %s", a.snapshotDir(name))
		}
		sb, err := st.get(from)
		if err != nil {
			return err
		}
		if sb.Status == statusRunning {
			return failf("snapshot source sandbox '%s' is not stopped", from)
		}
		snap = &snapshot{
			Name: name, Image: sb.Image, ImageConfig: sb.ImageConfig, Source: from,
			Labels: map[string]string{}, CreatedAt: a.now,
		}
		for _, l := range p.vals["label"] {
			k, v := parseLabel(l)
			snap.Labels[k] = v
		}
		files, err := a.rootFiles(sb)
		if err != nil {
			return failf("io error: snapshot: %v", err)
		}
		snap.RootFiles = files
		sum := sha256.New()
		fmt.Fprintf(sum, "%s\x00%s\x00%s\x00", name, from, a.now.Format(time.RFC3339Nano))
		for _, f := range files {
			sum.Write(f.data)
		}
		snap.Digest = "sha256:" + hex.EncodeToString(sum.Sum(nil))
		if err := a.saveFiles(a.snapshotDir(name), "", snap.RootFiles); err != nil {
			return failf("io error: snapshot: %v", err)
		}
		if st.Snapshots == nil {
			st.Snapshots = map[string]*snapshot{}
		}
		st.Snapshots[name] = snap
		return nil
	})
	if err != nil {
		return err
	}
	if !p.has("quiet") {
		fmt.Fprintf(a.stdout, "%s\n%s\n", snap.Digest, a.snapshotDir(name))
	}
	a.progress(p, "Snapshotted", from)
	return nil
}

// rootFiles reads back what msb placed in sb's root disk, with the bytes.
func (a *app) rootFiles(sb *sandbox) ([]copyFile, error) {
	var out []copyFile
	for i, f := range sb.CopyFiles {
		data, err := os.ReadFile(filepath.Join(a.patchDir(sb.Name), strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		f.data = data
		out = append(out, f)
	}
	for i, f := range sb.RootFiles {
		data, err := os.ReadFile(filepath.Join(a.patchDir(sb.Name), rootFilePrefix+strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		f.data = data
		out = append(out, f)
	}
	return out, nil
}

// loadSnapshotFiles returns snap's files with their bytes, for a sandbox
// booted from it.
func (a *app) loadSnapshotFiles(snap *snapshot) ([]copyFile, error) {
	out := slices.Clone(snap.RootFiles)
	for i := range out {
		data, err := os.ReadFile(filepath.Join(a.snapshotDir(snap.Name), strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		out[i].data = data
	}
	return out, nil
}

// snapshotListDoc is one entry of `snapshot list --format json`, with
// msb 0.6.18's keys.
type snapshotListDoc struct {
	ArtifactPath             string  `json:"artifact_path"`
	Availability             string  `json:"availability"`
	CheckpointManifestDigest *string `json:"checkpoint_manifest_digest"`
	CreatedAt                string  `json:"created_at"`
	Digest                   string  `json:"digest"`
	Format                   string  `json:"format"`
	Fstype                   string  `json:"fstype"`
	ImageRef                 string  `json:"image_ref"`
	Locality                 string  `json:"locality"`
	MigrationErrorCode       *string `json:"migration_error_code"`
	MigrationState           string  `json:"migration_state"`
	Name                     string  `json:"name"`
	ParentDigest             *string `json:"parent_digest"`
	Scope                    string  `json:"scope"`
	SizeBytes                int64   `json:"size_bytes"`
	StateKind                string  `json:"state_kind"`
}

// upperBytes is the apparent size fakemsb reports for every root disk.
const upperBytes = 4 << 30

// snapshotList prints the index newest first; fakemsb models only the
// JSON form, the one oma-sandbox reads.
func (a *app) snapshotList(p *parsed) error {
	if err := p.oneOf("format", "json"); err != nil {
		return err
	}
	if !p.has("format") {
		return failf("fakemsb: snapshot list models --format json only")
	}
	var snaps []*snapshot
	err := a.withState(func(st *state) error {
		for _, s := range st.Snapshots {
			snaps = append(snaps, s)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(snaps, func(x, y *snapshot) int {
		if c := y.CreatedAt.Compare(x.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	docs := make([]snapshotListDoc, 0, len(snaps))
	for _, s := range snaps {
		docs = append(docs, snapshotListDoc{
			ArtifactPath: a.snapshotDir(s.Name), Availability: "ready", CreatedAt: fmtTime(s.CreatedAt),
			Digest: s.Digest, Format: "raw", Fstype: "ext4", ImageRef: s.Image, Locality: "embedded",
			MigrationState: "canonical", Name: s.Name, Scope: "disk", SizeBytes: upperBytes, StateKind: "file",
		})
	}
	return a.printJSON(docs)
}

// snapshotInspect prints msb 0.6.18's text (there is no JSON form).
func (a *app) snapshotInspect(p *parsed) error {
	name := p.arg("SNAPSHOT")
	var snap *snapshot
	err := a.withState(func(st *state) error {
		if s, ok := st.Snapshots[name]; ok {
			snap = s
			return nil
		}
		return a.snapshotNotFound(name)
	})
	if err != nil {
		return err
	}
	labels := "-"
	if len(snap.Labels) > 0 {
		var kv []string
		for k, v := range snap.Labels {
			kv = append(kv, k+"="+v)
		}
		slices.Sort(kv)
		labels = strings.Join(kv, ", ")
	}
	for _, f := range [][2]string{
		{"Digest", snap.Digest}, {"Path", a.snapshotDir(snap.Name)}, {"Image", snap.Image},
		{"Scope", "disk"}, {"Parent", "-"}, {"Created", snap.CreatedAt.Local().Format("2006-01-02 15:04:05")},
		{"State", "file"}, {"Format", "raw"}, {"Filesystem", "ext4"}, {"Upper File", "upper.ext4"},
		{"Upper Size", "4.0 GiB"}, {"Integrity", "not recorded"}, {"Source Sandbox", snap.Source}, {"Labels", labels},
	} {
		fmt.Fprintf(a.stdout, "%-16s%s\n", f[0]+":", f[1])
	}
	return nil
}

// snapshotRemove removes each named snapshot in turn and stops at the
// first that is missing; -q silences that error too, as in msb. A sandbox
// booted from a snapshot has its own copy, so nothing stops a removal.
func (a *app) snapshotRemove(p *parsed) error {
	for _, name := range p.pos["SNAPSHOTS"] {
		err := a.withState(func(st *state) error {
			if _, ok := st.Snapshots[name]; !ok {
				return a.snapshotNotFound(name)
			}
			delete(st.Snapshots, name)
			return os.RemoveAll(a.snapshotDir(name))
		})
		if err != nil {
			if p.has("quiet") {
				return &exitError{code: 1}
			}
			return err
		}
		a.progress(p, "Removed", name)
	}
	return nil
}

// confDoc is the part of msb's sparse config (create --conf) fakemsb
// models: the image, as a reference or as {"snapshot": NAME}.
type confDoc struct {
	Image json.RawMessage `json:"image"`
}

// readConf returns the image reference or the snapshot name a conf file
// gives, as msb 0.6.18 resolves it.
func readConf(path string) (image, snap string, err error) {
	abs, err := filepath.Abs(path)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		return "", "", failf("failed to resolve config path %s: %s", path, rustIOError(err))
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return "", "", failf("failed to read config %s: %s", path, rustIOError(err))
	}
	var doc confDoc
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return "", "", failf("fakemsb: config %s: only JSON with an \"image\" field is modelled: %v", path, err)
	}
	if len(doc.Image) == 0 {
		return "", "", nil
	}
	if err := json.Unmarshal(doc.Image, &image); err == nil {
		return image, "", nil
	}
	var obj map[string]string
	if err := json.Unmarshal(doc.Image, &obj); err != nil || len(obj) != 1 || obj["snapshot"] == "" {
		return "", "", failf("fakemsb: config %s: image must be a reference or {\"snapshot\": NAME}", path)
	}
	return "", obj["snapshot"], nil
}

// confSource sets sb's image from the IMAGE argument, else from the
// --conf file, and returns the snapshot the file names instead, if any.
// As in msb, the argument wins over the file.
func confSource(p *parsed, sb *sandbox) (snap string, err error) {
	if sb.Image != "" {
		return "", nil
	}
	if p.has("conf") {
		if sb.Image, snap, err = readConf(p.str("conf")); err != nil {
			return "", err
		}
	}
	if sb.Image == "" && snap == "" {
		return "", failf("missing required sandbox field `image`; provide an image argument or set `image` in --conf")
	}
	return snap, nil
}

// bootFromSnapshot gives sb the snapshot's image and a copy of its root
// files. msb refuses patches (--copy-file) with a snapshot.
func (a *app) bootFromSnapshot(sb *sandbox, name string) error {
	var snap *snapshot
	err := a.withState(func(st *state) error {
		if snap = st.Snapshots[name]; snap == nil {
			return a.snapshotNotFound(name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(sb.CopyFiles) > 0 {
		return failf("invalid config: patches cannot be combined with from_snapshot")
	}
	files, err := a.loadSnapshotFiles(snap)
	if err != nil {
		return failf("io error: snapshot %s: %v", name, err)
	}
	sb.Image, sb.ImageConfig, sb.RootFiles = snap.Image, snap.ImageConfig, files
	return nil
}
