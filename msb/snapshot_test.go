package msb

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestSnapshotArgs(t *testing.T) {
	args, err := SnapshotCreateOptions{Name: "s1", From: "box", Labels: []Label{{Key: "k", Value: "v"}}, Quiet: true}.Args()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"snapshot", "create", "s1", "--from", "box", "--label", "k=v", "--quiet"}; !slices.Equal(args, want) {
		t.Errorf("args = %q, want %q", args, want)
	}
	args, err = SnapshotRemoveArgs("s1", "s2")
	if err != nil || !slices.Equal(args, []string{"snapshot", "remove", "s1", "s2"}) {
		t.Errorf("remove args = %q, %v", args, err)
	}
	for _, o := range []SnapshotCreateOptions{
		{Name: "", From: "box"},
		{Name: "bad/name", From: "box"},
		{Name: "-s", From: "box"},
		{Name: "s1", From: ""},
		{Name: "s1", From: "box", Labels: []Label{{Key: "", Value: "v"}}},
	} {
		if _, err := o.Args(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", o, err)
		}
	}
	if _, err := SnapshotRemoveArgs(); !errors.Is(err, ErrInvalid) {
		t.Errorf("remove of nothing: err = %v, want ErrInvalid", err)
	}
}

func TestCreateArgsWithConf(t *testing.T) {
	args, err := CreateOptions{Conf: "/tmp/c.json", Name: "box", Quiet: true}.Args()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"create", "--conf", "/tmp/c.json", "--name", "box", "--quiet"}; !slices.Equal(args, want) {
		t.Errorf("args = %q, want %q", args, want)
	}
	for _, o := range []CreateOptions{
		{Conf: "c.json", Name: "box"},
		{Conf: "/tmp/../c.json", Name: "box"},
		{Conf: "/tmp/c.json", Image: "img", Name: "box"},
		{Name: "box"}, // neither image nor conf
	} {
		if _, err := o.Args(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", o, err)
		}
	}
}

func TestWriteSnapshotConf(t *testing.T) {
	dir := t.TempDir()
	path, err := WriteSnapshotConf(dir, "snap-1")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]map[string]string
	if err := json.Unmarshal(data, &doc); err != nil || len(doc) != 1 || len(doc["image"]) != 1 || doc["image"]["snapshot"] != "snap-1" {
		t.Errorf("conf = %s (%v), want {\"image\":{\"snapshot\":\"snap-1\"}}", data, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("conf mode = %v (%v), want 0600", fi.Mode(), err)
	}
	// Exclusive: an existing file (or a planted link) is never written through.
	if _, err := WriteSnapshotConf(dir, "snap-2"); err == nil {
		t.Error("a second conf in the same directory was written over the first")
	}
	if _, err := WriteSnapshotConf(dir, "../x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad snapshot name: err = %v, want ErrInvalid", err)
	}
	if _, err := WriteSnapshotConf("rel", "snap"); !errors.Is(err, ErrInvalid) {
		t.Errorf("relative directory: err = %v, want ErrInvalid", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d files, want only the first conf", len(entries))
	}
}

func TestParseSnapshotList(t *testing.T) {
	list, err := ParseSnapshotList([]byte(`[
  {"name": "ours", "digest": "sha256:ab", "image_ref": "img:1", "created_at": "2026-11-30T17:58:30.890719454+00:00", "size_bytes": 4294967296},
  {"name": null, "digest": "sha256:cd", "image_ref": "img:1", "created_at": "2026-11-30T17:58:31+00:00"},
  {"name": "odd name/with slash", "digest": "sha256:ef", "created_at": "2026-11-30T17:58:32+00:00"}
]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].Name != "ours" || list[0].Digest != "sha256:ab" || list[0].ImageRef != "img:1" || list[0].CreatedAt.IsZero() {
		t.Fatalf("list = %+v", list)
	}
	if list[1].Name != "" || list[2].Name != "odd name/with slash" {
		t.Errorf("an unnamed or odd entry must be kept as is: %+v", list[1:])
	}
	if _, err := ParseSnapshotList([]byte(`[{"name": "x"}]`)); !errors.Is(err, ErrMalformedOutput) || !strings.Contains(err.Error(), "created_at") {
		t.Errorf("missing created_at: err = %v", err)
	}
}
