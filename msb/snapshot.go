package msb

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// Args validates o and returns
//
//	snapshot create NAME --from SANDBOX [--label K=V]... [--quiet]
//
// NAME is a bare name: msb keeps the artifact at $MSB_HOME/snapshots/NAME.
func (o SnapshotCreateOptions) Args() ([]string, error) {
	if err := ValidateName("snapshot name", o.Name); err != nil {
		return nil, err
	}
	if err := ValidateName("source sandbox", o.From); err != nil {
		return nil, err
	}
	args := []string{"snapshot", "create", o.Name, "--from", o.From}
	for _, l := range o.Labels {
		if err := checkLabel("label", l); err != nil {
			return nil, err
		}
		args = append(args, "--label", l.Key+"="+l.Value)
	}
	if o.Quiet {
		args = append(args, "--quiet")
	}
	return args, nil
}

// SnapshotRemoveArgs returns `snapshot remove NAME...`.
func SnapshotRemoveArgs(names ...string) ([]string, error) {
	if err := validateNames("snapshot name", names); err != nil {
		return nil, err
	}
	return append([]string{"snapshot", "remove"}, names...), nil
}

// SnapshotListArgs returns `snapshot list --format json`.
func SnapshotListArgs() []string { return []string{"snapshot", "list", "--format", "json"} }

// snapshotConfName is the file WriteSnapshotConf writes.
const snapshotConfName = "snapshot-conf.json"

// WriteSnapshotConf writes, into the existing directory dir, the msb
// sparse config {"image":{"snapshot":NAME}} and returns its path, for
// CreateOptions.Conf: the sandbox then boots from the snapshot (its image,
// and a private copy of its root disk) and runs no command, unlike `msb
// run -d --from-snapshot`, whose sandbox stops when the image's command
// ends. The file is created exclusively, owner-only; remove it after the
// create.
func WriteSnapshotConf(dir, snapshot string) (string, error) {
	if err := ValidateName("snapshot name", snapshot); err != nil {
		return "", err
	}
	if err := checkHostFile("conf directory", dir); err != nil {
		return "", err
	}
	data, err := json.Marshal(map[string]map[string]string{"image": {"snapshot": snapshot}})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, snapshotConfName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", err
	}
	return path, nil
}

// checkHostFile requires an absolute, clean host path that msb cannot
// read as a flag.
func checkHostFile(field, p string) error {
	if err := checkValue(field, p); err != nil {
		return err
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return invalid(field, p, "must be a clean absolute host path")
	}
	if strings.ContainsAny(p, "\n\r") {
		return invalid(field, p, "must not contain a line break")
	}
	return nil
}

// SnapshotCreate runs `msb snapshot create`.
func (c *Client) SnapshotCreate(ctx context.Context, o SnapshotCreateOptions) error {
	args, err := o.Args()
	_, err = c.run(ctx, args, err)
	return err
}

// SnapshotRemove runs `msb snapshot remove`.
func (c *Client) SnapshotRemove(ctx context.Context, names ...string) error {
	args, err := SnapshotRemoveArgs(names...)
	_, err = c.run(ctx, args, err)
	return err
}

// SnapshotList runs `msb snapshot list --format json` and parses it.
func (c *Client) SnapshotList(ctx context.Context) ([]Snapshot, error) {
	res, err := c.run(ctx, SnapshotListArgs(), nil)
	if err != nil {
		return nil, err
	}
	return ParseSnapshotList(res.Stdout)
}

// ParseSnapshotList parses `msb snapshot list --format json`.
func ParseSnapshotList(data []byte) ([]Snapshot, error) {
	const what = "snapshot list"
	entries, err := decodeArray(what, data)
	if err != nil {
		return nil, err
	}
	out := make([]Snapshot, 0, len(entries))
	for i, raw := range entries {
		o, err := decodeObject(what, i, "", raw)
		if err != nil {
			return nil, err
		}
		var s Snapshot
		// Names are not validated: a snapshot that is not ours must not
		// stop a listing.
		if s.Name, err = o.str("name", false); err != nil {
			return nil, err
		}
		if s.Digest, err = o.str("digest", false); err != nil {
			return nil, err
		}
		if s.ImageRef, err = o.str("image_ref", false); err != nil {
			return nil, err
		}
		if s.CreatedAt, err = o.time("created_at"); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
