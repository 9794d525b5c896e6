//go:build linux

package msb

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goldenDir holds what the real msb printed, captured by
// scripts/capture-msb.sh.
const goldenDir = "testdata/real-0.6.18"

// goldenCase is one captured msb invocation.
type goldenCase struct {
	Name    string
	Compare string // "fake" or "real"
	Args    []string
	Stdout  []byte
	Stderr  []byte
	Exit    string
}

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	list, err := os.ReadFile(filepath.Join(goldenDir, "cases"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		name, compare, _ := strings.Cut(line, " ")
		read := func(ext string) []byte {
			b, err := os.ReadFile(filepath.Join(goldenDir, name+"."+ext))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		cases = append(cases, goldenCase{
			Name: name, Compare: compare,
			Args:   strings.Split(strings.TrimSuffix(string(read("argv")), "\n"), "\n"),
			Stdout: read("stdout"), Stderr: read("stderr"),
			Exit: strings.TrimSpace(string(read("exit"))),
		})
	}
	return cases
}

// replay runs a captured case through the real runner: a script prints
// the captured output and exits with the captured code.
func replay(t *testing.T, c goldenCase) (*Result, error) {
	t.Helper()
	dir := t.TempDir()
	for ext, b := range map[string][]byte{"stdout": c.Stdout, "stderr": c.Stderr} {
		if err := os.WriteFile(filepath.Join(dir, ext), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := "cat '" + dir + "/stdout'; cat '" + dir + "/stderr' >&2; exit " + c.Exit
	return (&CLI{Path: fakeMSB(t, script)}).Run(context.Background(), Call{Args: c.Args})
}

// TestGoldenRealOutputs: every captured answer of the real msb is parsed
// and classified as the project relies on. A new capture whose cases
// differ fails here until each is accounted for.
func TestGoldenRealOutputs(t *testing.T) {
	type check func(t *testing.T, res *Result, err error)
	ok := func(t *testing.T, res *Result, err error) {
		if err != nil {
			t.Fatalf("err = %v, want success", err)
		}
	}
	kind := func(want error, msgPrefix string) check {
		return func(t *testing.T, res *Result, err error) {
			var e *ExitError
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want an *ExitError", err)
			}
			if e.Kind != want {
				t.Errorf("Kind = %v, want %v (message %q)", e.Kind, want, e.Message)
			}
			if !strings.HasPrefix(e.Message, msgPrefix) {
				t.Errorf("Message = %q, want prefix %q", e.Message, msgPrefix)
			}
		}
	}
	exit := func(code int) check {
		return func(t *testing.T, res *Result, err error) {
			var e *ExitError
			if !errors.As(err, &e) || e.ExitCode != code || e.Kind != nil {
				t.Errorf("err = %v, want an unclassified exit %d", err, code)
			}
		}
	}
	sandboxes := func(names ...string) check {
		return func(t *testing.T, res *Result, err error) {
			ok(t, res, err)
			list, err := ParseList(res.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range list {
				got = append(got, s.Name)
				if s.Status != "Stopped" || s.Image != "capture/tiny:1" || s.CreatedAt.Nanosecond() == 0 {
					t.Errorf("entry %+v: want a Stopped capture/tiny:1 with a nanosecond time", s)
				}
			}
			if strings.Join(got, ",") != strings.Join(names, ",") {
				t.Errorf("names = %v, want %v (newest first)", got, names)
			}
		}
	}
	volumes := func(names ...string) check {
		return func(t *testing.T, res *Result, err error) {
			ok(t, res, err)
			list, err := ParseVolumeList(res.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range list {
				got = append(got, v.Name)
				if v.Kind != "dir" || v.CreatedAt.IsZero() {
					t.Errorf("entry %+v: want a dir volume with a time", v)
				}
			}
			if strings.Join(got, ",") != strings.Join(names, ",") {
				t.Errorf("names = %v, want %v (newest first)", got, names)
			}
		}
	}
	inspect := func(network bool, labels string, mounts int) check {
		return func(t *testing.T, res *Result, err error) {
			ok(t, res, err)
			info, err := ParseInspect(res.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			if info.Network != network || info.Status != "Stopped" || info.Image != "capture/tiny:1" || info.Workdir != "/workspace" {
				t.Errorf("info = %+v; want network %v, Stopped, capture/tiny:1, /workspace", info, network)
			}
			if got := info.Labels["oma"]; got != labels {
				t.Errorf("label oma = %q, want %q", got, labels)
			}
			if len(info.Mounts) != mounts {
				t.Errorf("mounts = %+v, want %d", info.Mounts, mounts)
			}
			if info.User != "65534:65534" {
				t.Errorf("user = %q, want the image's 65534:65534", info.User)
			}
		}
	}
	// capports: forwarded ports, no network out (an ingress rule admits
	// forwarded connections only), resized by modify, which moves
	// updated_at past created_at.
	inspectPorts := func(cpus, memoryMiB int) check {
		return func(t *testing.T, res *Result, err error) {
			ok(t, res, err)
			info, err := ParseInspect(res.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			want := []PortForward{
				{Addr: "127.0.0.1", Host: 18080, Guest: 80, Protocol: "tcp"},
				{Addr: "127.0.0.1", Host: 18081, Guest: 81, Protocol: "udp"},
				{Addr: "::1", Host: 18082, Guest: 82, Protocol: "tcp"},
			}
			if info.Network || len(info.Ports) != len(want) || info.Ports[0] != want[0] || info.Ports[1] != want[1] || info.Ports[2] != want[2] {
				t.Errorf("network %v, ports %+v; want no network and %+v", info.Network, info.Ports, want)
			}
			if info.CPUs != cpus || info.MemoryMiB != memoryMiB {
				t.Errorf("resources %d CPUs %d MiB, want %d and %d", info.CPUs, info.MemoryMiB, cpus, memoryMiB)
			}
			if !info.UpdatedAt.After(info.CreatedAt) {
				t.Errorf("updated_at %v is not after created_at %v", info.UpdatedAt, info.CreatedAt)
			}
		}
	}
	snapshots := func(names ...string) check {
		return func(t *testing.T, res *Result, err error) {
			ok(t, res, err)
			list, err := ParseSnapshotList(res.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range list {
				got = append(got, s.Name)
				if s.ImageRef != "capture/tiny:1" || !strings.HasPrefix(s.Digest, "sha256:") || s.CreatedAt.IsZero() {
					t.Errorf("entry %+v: want a capture/tiny:1 snapshot with a digest and a time", s)
				}
			}
			if strings.Join(got, ",") != strings.Join(names, ",") {
				t.Errorf("names = %v, want %v", got, names)
			}
		}
	}
	notFound := kind(ErrSandboxNotFound, "sandbox not found: capbox")
	checks := map[string]check{
		"list-empty":                     sandboxes(),
		"volume-list-empty":              volumes(),
		"volume-create":                  ok,
		"volume-create-exists":           kind(ErrAlreadyExists, "volume already exists: capvol"),
		"volume-create-quiet":            ok,
		"volume-list":                    volumes("capvol2", "capvol"),
		"volume-inspect":                 ok,
		"volume-inspect-missing":         kind(ErrVolumeNotFound, "volume not found: nosuchvol"),
		"volume-remove":                  ok,
		"volume-remove-missing":          kind(ErrVolumeNotFound, "volume not found: capvol2"),
		"volume-remove-missing-quiet":    exit(1),
		"volume-create-invalid-name":     kind(nil, "invalid config: volume name must start with an alphanumeric"),
		"volume-create-long-name":        ok,
		"volume-remove-long-name":        ok,
		"volume-create-invalid-size":     kind(nil, "invalid size"),
		"volume-create-size-needs-disk":  kind(nil, "--size is only supported with --kind disk"),
		"volume-create-disk-needs-size":  kind(nil, "--size is required with --kind disk"),
		"create-invalid-name":            kind(nil, "invalid config: sandbox name must start with an alphanumeric"),
		"create-invalid-memory":          kind(nil, "invalid size"),
		"create-invalid-duration":        kind(nil, "invalid digit found in string"),
		"create-reserved-label":          kind(nil, "invalid config: label key 'sandbox.x' uses reserved prefix"),
		"create-uncached-image":          kind(ErrImageNotCached, "image error: image not cached: docker.io/capture/missing:1"),
		"create-copy-file-missing":       kind(nil, "--copy-file: stat $WORK/nosuch: No such file or directory (os error 2)"),
		"create-copy-file-bad-spec":      kind(nil, "--copy-file must be in format source:/guest"),
		"create-copy-file-relative-dst":  kind(nil, "--copy-file must be in format source:/guest"),
		"create-copy-file-empty-src":     kind(nil, "--copy-file source path cannot be empty"),
		"create-copy-file-dir":           kind(nil, "--copy-file: $WORK is not a file"),
		"create-copy-file-before-name":   kind(nil, "--copy-file: stat $WORK/nosuch"),
		"image-inspect-missing":          kind(ErrImageNotCached, "image not found: capture/missing:1"),
		"image-inspect":                  ok,
		"inspect-missing":                notFound,
		"remove-missing":                 notFound,
		"remove-missing-quiet":           exit(1),
		"stop-missing":                   notFound,
		"start-missing":                  notFound,
		"metrics-missing":                notFound,
		"exec-missing":                   notFound,
		"exec-invalid-timeout":           kind(nil, "invalid digit found in string"),
		"copy-from-missing":              notFound,
		"copy-to-missing":                notFound,
		"usage-unknown-flag":             exit(2),
		"list-running-and-stopped-empty": sandboxes(),
		"create-failed": kind(ErrStartFailed, `failed to start "capbox" → other: sandbox process exited (exit status: 1) before agent relay became available`+
			" → run `msb logs --source system capbox` for full diagnostics"),
		"create-exists":            kind(ErrAlreadyExists, "sandbox already exists: sandbox 'capbox' already exists"),
		"create-no-net":            kind(ErrStartFailed, `failed to start "capnonet" → `),
		"create-copy-file":         kind(ErrStartFailed, `failed to start "capcopy" → `),
		"list-records":             sandboxes("capcopy", "capnonet", "capbox"),
		"list-label":               sandboxes("capbox"),
		"list-running-and-stopped": sandboxes(),
		"inspect-record":           inspect(true, "capture", 3),
		"inspect-no-net":           inspect(false, "", 1),
		"inspect-copy-file": func(t *testing.T, res *Result, err error) {
			inspect(true, "", 1)(t, res, err)
			if info, _ := ParseInspect(res.Stdout); info == nil || len(info.CopyFiles) != 1 || info.CopyFiles[0] != "/.oma-sandbox/agent" {
				t.Errorf("copy files = %+v, want [/.oma-sandbox/agent]", info)
			}
		},
		"stop-stopped":                 ok,
		"metrics-stopped":              kind(ErrNoMetrics, `no metrics recorded for sandbox "capbox"`),
		"create-port-invalid":          kind(nil, "port must be in format HOST:GUEST[/udp] or BIND_ADDR:HOST:GUEST[/udp]"),
		"create-port-bad-host":         kind(nil, "invalid host port: 70000"),
		"create-port-bad-addr":         kind(nil, "invalid bind address: localhost"),
		"create-port-bad-guest":        kind(nil, "invalid guest port: 80/UDP"),
		"create-ports":                 kind(ErrStartFailed, `failed to start "capports" → `),
		"inspect-ports":                inspectPorts(1, 512),
		"stop-ports":                   ok,
		"modify-missing":               kind(ErrSandboxNotFound, "sandbox not found: capmissing"),
		"modify-zero-cpus":             kind(nil, `cannot modify "capports" → cpus must be greater than 0 → no changes were applied`),
		"modify-too-many-cpus":         exit(2),
		"modify-invalid-memory":        kind(nil, "invalid size"),
		"modify-stopped":               ok,
		"inspect-modified":             inspectPorts(2, 1024),
		"modify-unchanged":             ok,
		"inspect-unchanged":            inspectPorts(2, 1024),
		"snapshot-list-empty":          snapshots(),
		"snapshot-create-missing":      kind(ErrSandboxNotFound, "sandbox not found: capmissing"),
		"snapshot-create-invalid-name": kind(nil, "invalid config: snapshot name must be a bare identifier, not a path: 'bad/name'"),
		"snapshot-create":              ok,
		"snapshot-create-exists":       kind(ErrAlreadyExists, "snapshot already exists: $MSB_HOME/snapshots/capsnap"),
		"snapshot-list":                snapshots("capsnap"),
		"snapshot-inspect":             ok,
		// The snapshot is named in the conf file, not in argv: unclassified.
		"create-conf-missing-snapshot":  kind(nil, "snapshot not found: $MSB_HOME/snapshots/capnosnap"),
		"create-conf-copy-file":         kind(nil, "invalid config: patches cannot be combined with from_snapshot"),
		"create-from-snapshot":          kind(ErrStartFailed, `failed to start "capfork" → `),
		"inspect-from-snapshot":         inspect(true, "capture", 2),
		"snapshot-remove":               ok,
		"snapshot-remove-missing":       kind(ErrSnapshotNotFound, "snapshot not found: $MSB_HOME/snapshots/capsnap"),
		"snapshot-remove-missing-quiet": exit(1),
		"snapshot-list-after-remove":    snapshots(),
		"remove-records":                ok,
		"list-after-remove":             sandboxes(),
		"volume-remove-last":            ok,
		"volume-list-after-remove":      volumes(),
	}
	seen := map[string]bool{}
	for _, c := range loadGolden(t) {
		seen[c.Name] = true
		t.Run(c.Name, func(t *testing.T) {
			check, found := checks[c.Name]
			if !found {
				t.Fatalf("captured case %s has no expectation here", c.Name)
			}
			res, err := replay(t, c)
			check(t, res, err)
		})
	}
	for name := range checks {
		if !seen[name] {
			t.Errorf("expected case %s was not captured", name)
		}
	}
}
