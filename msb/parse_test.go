package msb

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const inspectSample = `{"name":"box1","status":"Running","created_at":"2026-08-22T14:49:44.123+00:00","updated_at":"2026-08-22T14:49:45+00:00","active_config":null,"pending_changes":[],
 "config":{"name":"box1",
  "image":{"Oci":{"reference":"alpine","root_disk":{"kind":"managed","size_mib":1024}}},
  "resources":{"cpus":1,"memory_mib":1024,"max_cpus":1,"max_memory_mib":1024},
  "runtime":{"workdir":"/workspace","shell":null,"scripts":{},"entrypoint":null,"cmd":null,"hostname":null,"user":null,"log_level":null},
  "env":[{"key":"K","value":"V"}],"labels":{"k":"v","oma.session":"s1"},"rlimits":[],
  "mounts":[{"type":"Named","name":"vol","guest":"/workspace","options":{"readonly":false,"noexec":false,"nosuid":false,"nodev":false}},
            {"type":"Tmpfs","guest":"/x","size_mib":1024,"options":{"readonly":true,"noexec":true,"nosuid":true,"nodev":true}}],
  "network":{"enabled":false},"pull_policy":"IfMissing","security_profile":"restricted",
  "lifecycle":{"ephemeral":false,"max_duration_secs":7200,"idle_timeout_secs":null}}}`

func TestParseTime(t *testing.T) {
	want := time.Date(2026, 8, 22, 14, 49, 44, 123e6, time.UTC)
	for _, in := range []string{"2026-08-22T14:49:44.123+00:00", "2026-08-22T14:49:44.123Z", "2026-08-22T16:49:44.123+02:00"} {
		got, err := ParseTime(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	got, err := ParseTime("2026-08-22 14:49:44")
	if wantLocal := time.Date(2026, 8, 22, 14, 49, 44, 0, time.Local); err != nil || !got.Equal(wantLocal) {
		t.Errorf("legacy ParseTime = %v, %v; want %v", got, err, wantLocal)
	}
	for _, bad := range []string{"", "yesterday", "2026-08-22", "2026-08-22T14:49:44", "2026-13-22 14:49:44", "1756000000"} {
		if _, err := ParseTime(bad); !errors.Is(err, ErrMalformedOutput) {
			t.Errorf("ParseTime(%q) = %v, want ErrMalformedOutput", bad, err)
		}
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList([]byte(`[{"created_at":"2026-08-22T14:49:44.123+00:00","image":"alpine","name":"box1","status":"Running","extra":{"x":1}},
		{"created_at":"2026-08-22 10:00:00","image":null,"name":"box2","status":"Stopped"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "box1" || got[0].Image != "alpine" || got[0].Status != "Running" ||
		!got[0].CreatedAt.Equal(time.Date(2026, 8, 22, 14, 49, 44, 123e6, time.UTC)) ||
		got[1].Name != "box2" || got[1].Image != "" || got[1].CreatedAt.Location() != time.Local {
		t.Fatalf("ParseList = %+v", got)
	}
	for _, empty := range []string{"", "  \n", "[]", "null"} {
		got, err := ParseList([]byte(empty))
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("ParseList(%q) = %#v, %v; want empty slice", empty, got, err)
		}
	}
}

func TestParseListRefusals(t *testing.T) {
	const ok = `"created_at":"2026-08-22T14:49:44Z","image":"alpine","status":"Running"`
	tests := []struct {
		name, in, index, field string
	}{
		{"not an array", `{"name":"x"}`, "", ""},
		{"garbage", `error: oops`, "", ""},
		{"entry not object", `[1]`, "entry 0", ""},
		{"missing name", `[{` + ok + `}]`, "entry 0", `"name"`},
		{"null name", `[{"name":null,` + ok + `}]`, "entry 0", `"name"`},
		{"numeric name", `[{"name":7,` + ok + `}]`, "entry 0", `"name"`},
		{"empty name", `[{"name":"box1",` + ok + `},{"name":"",` + ok + `}]`, "entry 1", `"name"`},
		{"missing status", `[{"name":"a","created_at":"2026-08-22T14:49:44Z"}]`, "entry 0", `"status"`},
		{"missing created_at", `[{"name":"a","status":"Running"}]`, "entry 0", `"created_at"`},
		{"bad created_at", `[{"name":"a","status":"Running","created_at":"soon"}]`, "entry 0", `"created_at"`},
		{"numeric created_at", `[{"name":"a","status":"Running","created_at":1756000000}]`, "entry 0", `"created_at"`},
		{"wrong-typed image", `[{"name":"a","status":"Running","created_at":"2026-08-22T14:49:44Z","image":{}}]`, "entry 0", `"image"`},
		{"trailing data", `[] []`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseList([]byte(tt.in))
			checkParseError(t, got, err, tt.index, tt.field)
		})
	}
}

func checkParseError[T any](t *testing.T, got T, err error, index, field string) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) || !errors.Is(err, ErrMalformedOutput) {
		t.Fatalf("got %+v, %v; want a ParseError", got, err)
	}
	if !strings.Contains(err.Error(), index) || !strings.Contains(err.Error(), field) {
		t.Errorf("error %q does not name %s %s", err, index, field)
	}
}

func TestParseVolumeList(t *testing.T) {
	got, err := ParseVolumeList([]byte(`[{"name":"vol","kind":"dir","quota_mib":null,"used_bytes":4096,"capacity_bytes":null,"disk_format":null,"disk_fstype":null,"created_at":"2026-08-22T14:49:44+00:00"},
		{"name":"v2","kind":"disk","used_bytes":null,"created_at":"2026-08-22 14:49:44"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "vol" || got[0].Kind != "dir" || got[0].UsedBytes != 4096 || got[0].CreatedAt.IsZero() ||
		got[1].Kind != "disk" || got[1].UsedBytes != 0 {
		t.Fatalf("ParseVolumeList = %+v", got)
	}
	// A name msb accepted but we would refuse (0.6.18 takes up to 250
	// bytes) is listed, not an error: it may not be ours.
	long := strings.Repeat("v", 200)
	if got, err := ParseVolumeList([]byte(`[{"name":"` + long + `","created_at":"2026-08-22T14:49:44Z"},{"name":"-x y","created_at":"2026-08-22T14:49:44Z"}]`)); err != nil || len(got) != 2 || got[0].Name != long {
		t.Errorf("ParseVolumeList of foreign names = %+v, %v", got, err)
	}
	if got, err := ParseList([]byte(`[{"name":"` + long + `","status":"Running","created_at":"2026-08-22T14:49:44Z"}]`)); err != nil || len(got) != 1 {
		t.Errorf("ParseList of a foreign name = %+v, %v", got, err)
	}
	if got, err := ParseVolumeList([]byte("[]")); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ParseVolumeList([]) = %#v, %v", got, err)
	}
	for name, in := range map[string]string{
		"missing name":       `[{"created_at":"2026-08-22T14:49:44Z"}]`,
		"empty name":         `[{"name":"","created_at":"2026-08-22T14:49:44Z"}]`,
		"missing created_at": `[{"name":"v"}]`,
		"negative used":      `[{"name":"v","used_bytes":-1,"created_at":"2026-08-22T14:49:44Z"}]`,
		"fractional used":    `[{"name":"v","used_bytes":1.5,"created_at":"2026-08-22T14:49:44Z"}]`,
		"string kind":        `[{"name":"v","kind":1,"created_at":"2026-08-22T14:49:44Z"}]`,
	} {
		if got, err := ParseVolumeList([]byte(in)); !errors.Is(err, ErrMalformedOutput) || !strings.Contains(err.Error(), "entry 0") {
			t.Errorf("%s: ParseVolumeList = %+v, %v; want a ParseError for entry 0", name, got, err)
		}
	}
}

func TestParseInspect(t *testing.T) {
	info, err := ParseInspect([]byte(inspectSample))
	if err != nil {
		t.Fatal(err)
	}
	want := SandboxInfo{
		Name: "box1", Status: "Running", Image: "alpine", CPUs: 1, MemoryMiB: 1024, Workdir: "/workspace", Network: false,
		CreatedAt: time.Date(2026, 8, 22, 14, 49, 44, 123e6, time.UTC),
	}
	if info.Name != want.Name || info.Status != want.Status || info.Image != want.Image || info.CPUs != want.CPUs ||
		info.MemoryMiB != want.MemoryMiB || info.Workdir != want.Workdir || info.Network != want.Network || !info.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("ParseInspect = %+v", info)
	}
	if len(info.Labels) != 2 || info.Labels["k"] != "v" || info.Labels["oma.session"] != "s1" {
		t.Errorf("labels = %v", info.Labels)
	}
	wantMounts := []MountInfo{
		{Type: "Named", Name: "vol", Guest: "/workspace"},
		{Type: "Tmpfs", Guest: "/x", SizeMiB: 1024, ReadOnly: true},
	}
	if len(info.Mounts) != 2 || info.Mounts[0] != wantMounts[0] || info.Mounts[1] != wantMounts[1] {
		t.Errorf("mounts = %+v, want %+v", info.Mounts, wantMounts)
	}

	minimal, err := ParseInspect([]byte(`{"name":"b","created_at":"2026-08-22T14:49:44Z"}`))
	if err != nil || minimal.Labels == nil || !minimal.Network || minimal.Mounts != nil {
		t.Errorf("minimal ParseInspect = %+v, %v; want non-nil labels and network counted as enabled", minimal, err)
	}
}

func TestParseInspectRefusals(t *testing.T) {
	const head = `{"name":"b","created_at":"2026-08-22T14:49:44Z","config":`
	for _, tt := range []struct{ name, in, field string }{
		{"empty", ``, ""},
		{"array", `[]`, ""},
		{"missing name", `{"created_at":"2026-08-22T14:49:44Z"}`, `"name"`},
		{"bad name", `{"name":"../x","created_at":"2026-08-22T14:49:44Z"}`, `"name"`},
		{"missing created_at", `{"name":"b"}`, `"created_at"`},
		{"config not object", head + `[]}`, `"config"`},
		{"reference not string", head + `{"image":{"Oci":{"reference":5}}}}`, `"config.image.Oci.reference"`},
		{"cpus string", head + `{"resources":{"cpus":"2"}}}`, `"config.resources.cpus"`},
		{"memory negative", head + `{"resources":{"memory_mib":-5}}}`, `"config.resources.memory_mib"`},
		{"memory huge", head + `{"resources":{"memory_mib":99999999999}}}`, `"config.resources.memory_mib"`},
		{"workdir number", head + `{"runtime":{"workdir":1}}}`, `"config.runtime.workdir"`},
		{"network string", head + `{"network":{"enabled":"no"}}}`, `"config.network.enabled"`},
		{"label number", head + `{"labels":{"k":1}}}`, `"config.labels.k"`},
		{"mounts object", head + `{"mounts":{}}}`, `"config.mounts"`},
		{"mount without type", head + `{"mounts":[{"guest":"/x"}]}}`, `"config.mounts[0].type"`},
		{"named mount bad name", head + `{"mounts":[{"type":"Named","name":"-v","guest":"/x"}]}}`, `"config.mounts[0].name"`},
		{"mount relative guest", head + `{"mounts":[{"type":"Tmpfs","guest":"x"}]}}`, `"config.mounts[0].guest"`},
		{"readonly string", head + `{"mounts":[{"type":"Tmpfs","guest":"/x","options":{"readonly":"yes"}}]}}`, `"config.mounts[0].options.readonly"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseInspect([]byte(tt.in))
			checkParseError(t, got, err, "inspect", tt.field)
		})
	}
}
