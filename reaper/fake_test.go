package reaper

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oma-sandbox/oma-sandbox/msb"
)

// fakeRunner is an in-memory msb answering the argv a sweep uses: list and
// volume list in msb's JSON shapes, remove and volume remove with msb's
// messages and exit codes. It logs every argv and the peak of concurrent calls.
type fakeRunner struct {
	mu        sync.Mutex
	sandboxes map[string]fakeSandbox
	volumes   map[string]string // name -> created_at as msb prints it
	snapshots map[string]string // name -> created_at as msb prints it
	calls     [][]string
	inFlight  int
	peak      int

	// fail maps a resource name to the msb error line its removal fails with.
	fail map[string]string
	// gone names resources that are listed but already removed by the time
	// their removal runs.
	gone map[string]bool
	// failList makes the next n `list` calls fail.
	failList int
	// hook, when set, runs inside every call before it is answered; a
	// non-nil error is returned as the call's error.
	hook func(ctx context.Context, argv []string) error
	// delay holds every removal, so concurrent ones overlap.
	delay time.Duration
}

type fakeSandbox struct {
	created string
	labels  map[string]string
	// status is "Stopped" unless set; updated is inspect's updated_at,
	// created unless set, null when "null".
	status, updated string
}

func newFakeRunner() *fakeRunner {
	return &fakeRunner{
		sandboxes: map[string]fakeSandbox{},
		volumes:   map[string]string{},
		snapshots: map[string]string{},
		fail:      map[string]string{},
		gone:      map[string]bool{},
	}
}

func rfc3339(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000+00:00") }

func (f *fakeRunner) addSandbox(name string, created time.Time, labels []msb.Label) {
	f.addSandboxRaw(name, rfc3339(created), labels)
}

func (f *fakeRunner) addSandboxRaw(name, created string, labels []msb.Label) {
	m := map[string]string{}
	for _, l := range labels {
		m[l.Key] = l.Value
	}
	f.sandboxes[name] = fakeSandbox{created: created, labels: m}
}

func (sb fakeSandbox) statusOr() string {
	if sb.status == "" {
		return "Stopped"
	}
	return sb.status
}

// setActivity sets a sandbox's status and inspect's updated_at.
func (f *fakeRunner) setActivity(name, status string, updated time.Time) {
	sb := f.sandboxes[name]
	sb.status, sb.updated = status, rfc3339(updated)
	f.sandboxes[name] = sb
}

func (f *fakeRunner) addVolume(name string, created time.Time) { f.volumes[name] = rfc3339(created) }

func (f *fakeRunner) addSnapshot(name string, created time.Time) {
	f.snapshots[name] = rfc3339(created)
}

func (f *fakeRunner) snapshotNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedKeys(f.snapshots)
}

func (f *fakeRunner) log() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeRunner) sandboxNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedKeys(f.sandboxes)
}

func (f *fakeRunner) volumeNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedKeys(f.volumes)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// parseArgv splits argv into the subcommand ("list", "volume remove", ...),
// its label filters and its positional names.
func parseArgv(argv []string) (cmd string, labels map[string]string, names []string) {
	labels = map[string]string{}
	rest := argv
	if len(rest) > 0 && (rest[0] == "volume" || rest[0] == "snapshot") {
		cmd, rest = rest[0]+" ", rest[1:]
	}
	if len(rest) > 0 {
		cmd, rest = cmd+rest[0], rest[1:]
	}
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--label" && i+1 < len(rest):
			i++
			k, v, _ := strings.Cut(rest[i], "=")
			labels[k] = v
		case strings.HasPrefix(a, "--label="):
			k, v, _ := strings.Cut(strings.TrimPrefix(a, "--label="), "=")
			labels[k] = v
		case a == "--format":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			names = append(names, a)
		}
	}
	return cmd, labels, names
}

func (f *fakeRunner) Run(ctx context.Context, c msb.Call) (*msb.Result, error) {
	argv := slices.Clone(c.Args)
	f.mu.Lock()
	f.calls = append(f.calls, argv)
	f.inFlight++
	f.peak = max(f.peak, f.inFlight)
	hook, delay := f.hook, f.delay
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()

	if hook != nil {
		if err := hook(ctx, argv); err != nil {
			return nil, err
		}
	}
	cmd, labels, names := parseArgv(argv)
	if strings.HasSuffix(cmd, "remove") && delay > 0 {
		time.Sleep(delay)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	switch cmd {
	case "list":
		if f.failList > 0 {
			f.failList--
			return f.exit(argv, "error: database is locked")
		}
		type entry struct {
			CreatedAt string `json:"created_at"`
			Image     string `json:"image"`
			Name      string `json:"name"`
			Status    string `json:"status"`
		}
		out := []entry{}
		for _, name := range sortedKeys(f.sandboxes) {
			sb := f.sandboxes[name]
			if matches(sb.labels, labels) {
				out = append(out, entry{sb.created, "alpine", name, sb.statusOr()})
			}
		}
		return f.json(argv, out)
	case "inspect":
		sb, ok := f.sandboxes[names[0]]
		if msg, failed := f.fail["inspect "+names[0]]; failed {
			return f.exit(argv, "error: "+msg)
		}
		if !ok || f.gone[names[0]] {
			return f.exit(argv, "error: sandbox not found: "+names[0])
		}
		var updated any = sb.updated
		switch sb.updated {
		case "":
			updated = sb.created
		case "null":
			updated = nil
		}
		return f.json(argv, map[string]any{"name": names[0], "status": sb.statusOr(), "created_at": sb.created, "updated_at": updated,
			"config": map[string]any{"labels": sb.labels}})
	case "volume list":
		type entry struct {
			Name          string  `json:"name"`
			Kind          string  `json:"kind"`
			QuotaMiB      *int    `json:"quota_mib"`
			UsedBytes     int64   `json:"used_bytes"`
			CapacityBytes *int64  `json:"capacity_bytes"`
			DiskFormat    *string `json:"disk_format"`
			DiskFSType    *string `json:"disk_fstype"`
			CreatedAt     string  `json:"created_at"`
		}
		out := []entry{}
		for _, name := range sortedKeys(f.volumes) {
			out = append(out, entry{Name: name, Kind: "dir", CreatedAt: f.volumes[name]})
		}
		return f.json(argv, out)
	case "snapshot list":
		if msg, failed := f.fail["snapshot list"]; failed {
			return f.exit(argv, "error: "+msg)
		}
		type entry struct {
			Name      *string `json:"name"`
			Digest    string  `json:"digest"`
			ImageRef  string  `json:"image_ref"`
			CreatedAt string  `json:"created_at"`
		}
		out := []entry{}
		for _, name := range sortedKeys(f.snapshots) {
			n := &name
			if name == "" {
				n = nil // made with a path
			}
			out = append(out, entry{Name: n, Digest: "sha256:00", ImageRef: "alpine", CreatedAt: f.snapshots[name]})
		}
		return f.json(argv, out)
	case "snapshot remove":
		if len(names) != 1 {
			return nil, fmt.Errorf("fake msb: want one name per removal, got %q", argv)
		}
		name := names[0]
		if msg, ok := f.fail[name]; ok {
			return f.exit(argv, "error: "+msg)
		}
		if _, ok := f.snapshots[name]; !ok || f.gone[name] {
			return f.exit(argv, "error: snapshot not found: /home/u/.microsandbox/snapshots/"+name)
		}
		delete(f.snapshots, name)
		return &msb.Result{Args: argv}, nil
	case "remove", "volume remove":
		if len(names) != 1 {
			return nil, fmt.Errorf("fake msb: want one name per removal, got %q", argv)
		}
		name := names[0]
		kind, exists := "sandbox", false
		if cmd == "remove" {
			_, exists = f.sandboxes[name]
		} else {
			kind = "volume"
			_, exists = f.volumes[name]
		}
		if msg, ok := f.fail[name]; ok {
			return f.exit(argv, "error: "+msg)
		}
		if !exists || f.gone[name] {
			return f.exit(argv, fmt.Sprintf("error: %s not found: %s", kind, name))
		}
		if kind == "sandbox" {
			delete(f.sandboxes, name)
		} else {
			delete(f.volumes, name)
		}
		return &msb.Result{Args: argv}, nil
	}
	return nil, fmt.Errorf("fake msb: unexpected argv %q", argv)
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (f *fakeRunner) json(argv []string, v any) (*msb.Result, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &msb.Result{Args: argv, Stdout: append(b, '\n')}, nil
}

// exit answers as msb does on failure: exit 1 and an "error: ..." line. The
// Result carries what the process printed, the error is what the CLI runner
// makes of it.
func (f *fakeRunner) exit(argv []string, line string) (*msb.Result, error) {
	stderr := []byte(line + "\n")
	msg := strings.TrimPrefix(line, "error: ")
	var kind error
	switch {
	case strings.HasPrefix(msg, "sandbox not found: "):
		kind = msb.ErrSandboxNotFound
	case strings.HasPrefix(msg, "volume not found: "):
		kind = msb.ErrVolumeNotFound
	case strings.HasPrefix(msg, "snapshot not found: "):
		kind = msb.ErrSnapshotNotFound
	case strings.Contains(msg, "is attached to active sandbox"):
		kind = msb.ErrVolumeAttached
	}
	return &msb.Result{Args: argv, ExitCode: 1, Stderr: stderr},
		&msb.ExitError{Args: argv, ExitCode: 1, Message: msg, Stderr: stderr, Kind: kind}
}
