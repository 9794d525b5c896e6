//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const fixedNow = "2026-08-22T14:49:44.123Z"

func tail(usage string) string {
	return "\nUsage: " + usage + "\n\nFor more information, try '--help'.\n"
}

const (
	createUsage = "msb create [OPTIONS] [IMAGE]"
	sizeReason  = "invalid size (expected e.g. 512M, 1G): invalid digit found in string"
	durError    = "error: invalid digit found in string\n"
)

// invalid is clap's refusal of a flag's value: no usage line.
func invalid(value, flag, reason string) string {
	return fmt.Sprintf("error: invalid value '%s' for '%s': %s\n\nFor more information, try '--help'.\n", value, flag, reason)
}

// config is msb's "invalid config" refusal.
func config(reason string) string { return "error: invalid config: " + reason + "\n" }

// step is one invocation of the contract table with its exact expected
// stdout, stderr and exit code.
type step struct {
	args []string
	out  string
	err  string
	code int
}

func a(args ...string) []string { return args }

func TestContract(t *testing.T) {
	f := newFx(t)
	f.env = []string{"FAKEMSB_NOW=" + fixedNow}
	ts := "2026-08-22T14:49:44.123+00:00"
	local := time.Date(2026, 8, 22, 14, 49, 44, 123e6, time.UTC).Local().Format("2006-01-02 15:04:05")
	cfg1 := `{"name":"box1","image":{"Oci":{"reference":"alpine","root_disk":{"kind":"managed","size_mib":2048}}},` +
		`"resources":{"cpus":2,"memory_mib":1536,"max_cpus":2,"max_memory_mib":1536},` +
		`"runtime":{"workdir":"/workspace","shell":null,"scripts":{},"entrypoint":null,"cmd":null,"hostname":null,"user":null,"log_level":null},` +
		`"env":[],"labels":{"env":"dev","team":"a"},"rlimits":[],` +
		`"mounts":[{"type":"Named","name":"vol1","guest":"/workspace","options":{"readonly":false,"noexec":false,"nosuid":false,"nodev":false}},` +
		`{"type":"Tmpfs","guest":"/mnt/out","size_mib":64,"options":{"readonly":false,"noexec":true,"nosuid":true,"nodev":true}}],` +
		`"network":{"enabled":false},"patches":[],"pull_policy":"Never","security_profile":"restricted",` +
		`"lifecycle":{"ephemeral":false,"max_duration_secs":7200,"idle_timeout_secs":300}}`
	cfg2 := `{"name":"box2","image":{"Oci":{"reference":"debian:12","root_disk":{"kind":"managed","size_mib":1024}}},` +
		`"resources":{"cpus":1,"memory_mib":512,"max_cpus":1,"max_memory_mib":512},` +
		`"runtime":{"workdir":null,"shell":null,"scripts":{},"entrypoint":null,"cmd":null,"hostname":null,"user":null,"log_level":null},` +
		`"env":[],"labels":{"flag":"","team":"b"},"rlimits":[],"mounts":[],"network":{"enabled":true},"patches":[],"pull_policy":"IfMissing","security_profile":"default",` +
		`"lifecycle":{"ephemeral":false,"max_duration_secs":null,"idle_timeout_secs":null}}`
	vdir := func(kind string, name string) string {
		if kind == "disk" {
			return `{"name":"` + name + `","kind":"disk","quota_mib":null,"used_bytes":0,"capacity_bytes":1073741824,"disk_format":"raw","disk_fstype":"ext4","created_at":"` + ts + `"}`
		}
		return `{"name":"` + name + `","kind":"dir","quota_mib":null,"used_bytes":0,"capacity_bytes":null,"disk_format":null,"disk_fstype":null,"created_at":"` + ts + `"}`
	}
	steps := []step{
		// create: usage errors (exit 2).
		{a("create"), "", "error: missing required sandbox field `image`; provide an image argument or set `image` in --conf\n", 1},
		{a("create", "alpine", "--bogus"), "", "error: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use '-- --bogus'\n" + tail(createUsage), 2},
		{a("create", "alpine", "x"), "", "error: unexpected argument 'x' found\n" + tail(createUsage), 2},
		{a("create", "alpine", "-n"), "", "error: a value is required for '--name <NAME>' but none was supplied\n" + tail(createUsage), 2},
		{a("create", "alpine", "-n", "a", "-n", "b"), "", "error: the argument '--name <NAME>' cannot be used multiple times\n" + tail(createUsage), 2},
		// create: msb's own checks of the values (exit 1), as msb 0.6.18 words them.
		{a("create", "alpine", "-n", "bad name"), "", config("sandbox name must start with an alphanumeric and contain only alphanumeric, dots, hyphens, and underscores: bad name"), 1},
		{a("create", "alpine", "-n", "-lead"), "", "error: a value is required for '--name <NAME>' but none was supplied\n" + tail(createUsage), 2},
		{a("create", "alpine", "--name=.dot"), "", config("sandbox name must start with an alphanumeric and contain only alphanumeric, dots, hyphens, and underscores: .dot"), 1},
		{a("create", "alpine", "-n", strings.Repeat("x", 129)), "", config("sandbox name must be at most 128 characters: got 129"), 1},
		{a("create", "alpine", "-m", "1Gi"), "", "error: " + sizeReason + "\n", 1},
		{a("create", "alpine", "-m", "1GB"), "", "error: " + sizeReason + "\n", 1},
		{a("create", "alpine", "--memory", "512K"), "", "error: " + sizeReason + "\n", 1},
		{a("create", "alpine", "--memory", "1.5M"), "", "error: invalid size: invalid digit found in string\n", 1},
		{a("create", "alpine", "--root-disk", "xG"), "", "error: --root-disk: invalid size: invalid float literal (expected a size, tmpfs[:SIZE], flat[:SIZE][,OPTIONS], or an image path)\n", 1},
		{a("create", "alpine", "--max-duration", "10ms"), "", durError, 1},
		{a("create", "alpine", "--max-duration", "1d"), "", durError, 1},
		{a("create", "alpine", "--idle-timeout", "1h30m"), "", durError, 1},
		{a("create", "alpine", "--root-disk", "1G", "--oci-upper-size", "1G"), "", "error: the argument '--root-disk <SIZE>' cannot be used with '--oci-upper-size <SIZE>'\n" + tail(createUsage), 2},
		{a("create", "alpine", "--security", "lax"), "", "error: invalid value 'lax' for '--security <SECURITY>'\n  [possible values: default, restricted]\n" + tail(createUsage), 2},
		{a("create", "alpine", "--pull", "sometimes"), "", "error: invalid value 'sometimes' for '--pull <PULL>'\n  [possible values: always, if-missing, never]\n" + tail(createUsage), 2},
		{a("create", "alpine", "-c", "two"), "", invalid("two", "--cpus <CPUS>", "invalid digit found in string"), 2},
		{a("create", "alpine", "--tmpfs", "rel/path"), "", config("guest mount path must be absolute: rel/path"), 1},
		{a("create", "alpine", "--tmpfs", "/x:64M:exec"), "", "error: unsupported mount option \"exec\"\n", 1},
		{a("create", "alpine", "--mount-named", "vol"), "", "error: mount-named must be in format source:/guest[:options]\n", 1},
		{a("create", "alpine", "--mount-named", "v:/w:kind=lvm"), "", "error: invalid named volume kind \"lvm\" (expected dir|disk)\n", 1},
		{a("create", "alpine", "--label", "sandbox.id=1"), "", config("label key 'sandbox.id' uses reserved prefix 'sandbox.'"), 1},
		{a("create", "alpine", "--label", "microsandbox.x"), "", config("label key 'microsandbox.x' uses reserved prefix 'microsandbox.'"), 1},
		{a("create", "alpine", "--label", "service.port=80"), "", config("label key 'service.port' uses reserved prefix 'service.'"), 1},
		// create: success. The name is printed only when generated.
		{a("create", "alpine", "-n", "box1", "--label", "team=a", "--label", "env=dev", "-m", "1.5G", "-c", "2", "--root-disk", "2G",
			"--max-duration", "2h", "--idle-timeout", "300", "--mount-named", "vol1:/workspace:kind=dir", "--tmpfs", "/mnt/out:64m:noexec,nosuid,nodev",
			"-w", "/workspace", "--no-net", "--security", "restricted", "--pull", "never"), "", "   ✓ Created      box1\n", 0},
		{a("create", "alpine", "-n", "box1"), "", "error: sandbox already exists: sandbox 'box1' already exists; remove it, start the stopped sandbox, or recreate with .replace()\n", 1},
		{a("create", "debian:12", "-n", "box2", "--oci-upper-size", "1g", "-q", "--label", "team=b", "--label", "flag"), "", "", 0},
		// list.
		{a("list", "--format", "json"), `[{"created_at":"` + ts + `","image":"alpine","name":"box1","status":"Running"},{"created_at":"` + ts + `","image":"debian:12","name":"box2","status":"Running"}]` + "\n", "", 0},
		{a("ls", "--format", "json", "--label", "team=a"), `[{"created_at":"` + ts + `","image":"alpine","name":"box1","status":"Running"}]` + "\n", "", 0},
		{a("list", "--format", "json", "--label", "team=a", "--label", "env=prod"), "[]\n", "", 0},
		{a("list", "--format", "json", "--label", "flag"), `[{"created_at":"` + ts + `","image":"debian:12","name":"box2","status":"Running"}]` + "\n", "", 0},
		{a("list", "-q"), "box1\nbox2\n", "", 0},
		{a("list", "--format", "yaml"), "", "error: invalid value 'yaml' for '--format <FORMAT>'\n  [possible values: json]\n" + tail("msb list [OPTIONS]"), 2},
		// inspect.
		{a("inspect", "box1", "--format", "json"), `{"name":"box1","status":"Running","created_at":"` + ts + `","updated_at":"` + ts + `","active_config":` + cfg1 + `,"pending_changes":[],"config":` + cfg1 + "}\n", "", 0},
		{a("inspect", "nope", "--format", "json"), "", "error: sandbox not found: nope\n", 1},
		{a("inspect"), "", "error: the following required arguments were not provided:\n  <NAME>\n" + tail("msb inspect [OPTIONS] <NAME>"), 2},
		// stop / start.
		{a("stop", "box2"), "", "   ✓ Stopped      box2 (<TOOK>)\n", 0},
		{a("stop", "box2", "-q"), "", "", 0},
		{a("inspect", "box2", "--format", "json"), `{"name":"box2","status":"Stopped","created_at":"` + ts + `","updated_at":"` + ts + `","active_config":null,"pending_changes":[],"config":` + cfg2 + "}\n", "", 0},
		{a("list", "--running", "-q"), "box1\n", "", 0},
		{a("list", "--stopped", "--format", "json"), `[{"created_at":"` + ts + `","image":"debian:12","name":"box2","status":"Stopped"}]` + "\n", "", 0},
		{a("list", "--running", "--stopped", "-q"), "", "", 0}, // both filters hold: nothing
		{a("start", "box2"), "", "   ✓ Started      box2 (<TOOK>)\n", 0},
		{a("stop", "-t", "x", "box2"), "", invalid("x", "--timeout <TIMEOUT>", "invalid digit found in string"), 2},
		{a("stop", "-f", "-t", "5", "-q", "box2"), "", "", 0},
		{a("start", "--label", "team=b", "-q"), "", "", 0},
		{a("stop", "--label", "team=b", "-q"), "", "", 0},
		{a("list", "--stopped", "-q"), "box2\n", "", 0},
		{a("stop", "nope"), "", "error: sandbox not found: nope\n", 1},
		{a("stop"), "", "error: the following required arguments were not provided:\n  <NAMES>...\n" + tail("msb stop [OPTIONS] [NAMES]..."), 2},
		{a("start", "nope", "-q"), "", "", 1}, // -q silences start's errors
		// exec argument errors.
		{a("exec", "nope", "--", "true"), "", "error: sandbox not found: nope\n", 1},
		{a("exec", "box1", "true"), "", "error: unexpected argument 'true' found\n" + tail("msb exec [OPTIONS] <NAME> -- <COMMAND>..."), 2},
		{a("exec", "box1", "--"), "", "error: the following required arguments were not provided:\n  <COMMAND>...\n" + tail("msb exec [OPTIONS] <NAME> -- <COMMAND>..."), 2},
		{a("exec", "--timeout", "1d", "box1", "--", "true"), "", durError, 1},
		{a("exec", "--stream", "-t", "box1", "--", "true"), "", "error: the argument '--stream' cannot be used with '--tty'\n" + tail("msb exec [OPTIONS] <NAME> -- <COMMAND>..."), 2},
		{a("exec", "-u", "nosuchuser", "box1", "--", "true"), "", "error: exec failed: user not found: nosuchuser\n", 1},
		{a("exec", "--no-tty", "-q", "box1", "--", "echo", "ok"), "ok\n", "", 0},
		{a("exec", "--stream", "-e", "K=V", "box1", "--", "sh", "-c", "echo $K"), "V\n", "", 0},
		{a("exec", "-e", "NOT_SET_ANYWHERE", "box1", "--", "true"), "", "error: environment variable 'NOT_SET_ANYWHERE' not set\n", 1},
		// copy argument errors.
		{a("copy", "./a", "/b"), "", "error: invalid config: exactly one of SRC and DST must be a sandbox path (NAME:/absolute/path)\n", 1},
		{a("cp", "box1:/a", "box2:/b"), "", "error: invalid config: exactly one of SRC and DST must be a sandbox path (NAME:/absolute/path)\n", 1},
		{a("copy", "box1:rel", "./b"), "", "error: invalid config: sandbox path must be absolute: rel\n", 1},
		{a("copy", "nope:/a", "./b"), "", "error: sandbox not found: nope\n", 1},
		{a("copy", "-q", "box1:/workspace", "box1:/x"), "", "error: invalid config: exactly one of SRC and DST must be a sandbox path (NAME:/absolute/path)\n", 1},
		{a("copy", "box1:/a"), "", "error: the following required arguments were not provided:\n  <DST>\n" + tail("msb copy [OPTIONS] <SRC> <DST>"), 2},
		// volumes.
		{a("volume", "create"), "", "error: volume create requires a name\n", 1},
		{a("volume", "create", "vol2"), "vol2\n", "", 0},
		{a("volume", "create", "--name", "vol3", "-q"), "", "", 0},
		{a("volume", "create", "vol2"), "", "error: volume already exists: vol2\n", 1},
		{a("volume", "create", "vol1", "-q"), "", "error: volume already exists: vol1\n", 1},
		{a("volume", "create", "bad/name"), "", config("volume name must start with an alphanumeric character and contain only alphanumeric characters, dots, hyphens, and underscores: bad/name"), 1},
		{a("volume", "create", "vx", "--size", "1G"), "", "error: --size is only supported with --kind disk until directory quotas are enforced\n", 1},
		{a("volume", "create", "vx", "--kind", "disk"), "", "error: --size is required with --kind disk\n", 1},
		{a("volume", "create", "vx", "--kind", "zfs"), "", "error: invalid value 'zfs' for '--kind <KIND>'\n  [possible values: dir, disk]\n" + tail("msb volume create [OPTIONS] [NAME]"), 2},
		{a("volume", "create", "vd", "--kind", "disk", "--size", "1G"), "vd\n", "", 0},
		{a("volume", "list", "--format", "json"), "[" + vdir("disk", "vd") + "," + vdir("dir", "vol1") + "," + vdir("dir", "vol2") + "," + vdir("dir", "vol3") + "]\n", "", 0},
		{a("volume", "ls", "-q"), "vd\nvol1\nvol2\nvol3\n", "", 0},
		{a("volume", "inspect", "vol2"), "Name:           vol2\nKind:           dir\nQuota:          unlimited\nPath:           " + f.home + "/volumes/vol2\nCreated:        " + local + "\nLabels:         -\n", "", 0},
		{a("volume", "inspect", "vd"), "Name:           vd\nKind:           disk\nFormat:         raw\nFilesystem:     ext4\nCapacity:       1 GiB\nPath:           " + f.home + "/volumes/vd\nCreated:        " + local + "\nLabels:         -\n", "", 0},
		{a("volume", "inspect", "nope"), "", "error: volume not found: nope\n", 1},
		{a("volume", "inspect", "vol2", "--format", "json"), "", "error: unexpected argument '--format' found\n\n  tip: to pass '--format' as a value, use '-- --format'\n" + tail("msb volume inspect <NAME>"), 2},
		{a("volume", "remove", "vol1"), "", "error: invalid config: volume \"vol1\" is attached to active sandbox \"box1\"\n", 1},
		{a("volume", "rm", "nope", "-q"), "", "", 1}, // -q silences volume remove's errors
		{a("volume", "remove", "vol2", "vol3", "vd"), "", "   ✓ Removed      vol2\n   ✓ Removed      vol3\n   ✓ Removed      vd\n", 0},
		{a("volume", "remove"), "", "error: the following required arguments were not provided:\n  <NAMES>...\n" + tail("msb volume remove [OPTIONS] <NAMES>..."), 2},
		{a("volume", "frob"), "", "error: unrecognized subcommand 'frob'\n" + tail("msb volume <COMMAND>"), 2},
		// remove.
		{a("remove", "box1"), "", "error: sandbox still running: cannot remove sandbox 'box1': still running\n", 1},
		{a("remove", "nope", "-q"), "", "", 1}, // -q silences remove's errors
		{a("rm", "nope", "box2", "-q"), "", "", 1},
		{a("remove"), "", "error: the following required arguments were not provided:\n  <NAMES>...\n" + tail("msb remove [OPTIONS] [NAMES]..."), 2},
		{a("remove", "--force", "--label", "team=a"), "", "   ✓ Removed      box1\n", 0},
		{a("volume", "remove", "vol1", "-q"), "", "", 0},
		{a("list", "--format", "json"), "[]\n", "", 0},
		{a("volume", "list", "--format", "json"), "[]\n", "", 0},
		{a("list"), "", "No sandboxes found.\n", 0},
		// top level.
		{a("frobnicate"), "", "error: unrecognized subcommand 'frobnicate'\n" + tail("msb [OPTIONS] <COMMAND>"), 2},
		{a(), "", "error: 'msb' requires a subcommand but one was not provided\n" + tail("msb [OPTIONS] <COMMAND>"), 2},
	}
	for i, s := range steps {
		r := f.run(s.args...)
		if strings.HasPrefix(s.out, "[") || strings.HasPrefix(s.out, "{") {
			// JSON: the same document; its pretty form is checked against
			// real msb's in TestMatchesRealMSB.
			assert.JSONEq(t, s.out, r.stdout, "step %d %v", i, s.args)
			r.stdout = s.out
		}
		// How long a start or stop took varies.
		r.stderr = took.ReplaceAllString(r.stderr, " (<TOOK>)\n")
		assert.Equal(t, step{s.args, s.out, s.err, s.code}, step{s.args, r.stdout, r.stderr, r.code}, "step %d", i)
	}
}

func TestFmtTimeDigits(t *testing.T) {
	base := time.Date(2026, 11, 30, 14, 36, 15, 0, time.FixedZone("x", 3600))
	for ns, want := range map[int]string{
		0:         "2026-11-30T13:36:15+00:00",
		120e6:     "2026-11-30T13:36:15.120+00:00",
		541837e3:  "2026-11-30T13:36:15.541837+00:00",
		541837017: "2026-11-30T13:36:15.541837017+00:00",
		5:         "2026-11-30T13:36:15.000000005+00:00",
	} {
		assert.Equal(t, want, fmtTime(base.Add(time.Duration(ns))))
	}
}

func TestCreateGeneratedName(t *testing.T) {
	f := newFx(t)
	r := f.ok("create", "alpine", "-q")
	require.Regexp(t, regexp.MustCompile(`^msb-[0-9a-f]{8}\n$`), r.stdout)
	name := strings.TrimSpace(r.stdout)
	assert.Equal(t, "", f.ok("exec", name, "--", "true").stdout)
	f.ok("rm", "-f", "-q", name)
}

func TestCreateReplace(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q", "--label", "gen=1")
	old := f.state().Sandboxes["box"].Holder
	f.ok("create", "debian", "-n", "box", "-q", "--replace", "--label", "gen=2")
	sb := f.state().Sandboxes["box"]
	assert.Equal(t, "debian", sb.Image)
	assert.Equal(t, map[string]string{"gen": "2"}, sb.Labels)
	assert.False(t, old.alive(), "the replaced holder must be gone")
	assert.True(t, sb.Holder.alive())
}

func TestInspectJSONParses(t *testing.T) {
	f := newFx(t)
	f.ok("create", "alpine", "-n", "box", "-q", "--mount-named", "v:/workspace:ro,noexec", "--tmpfs", "/scratch")
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(f.ok("inspect", "box", "--format", "json").stdout), &doc))
	cfg := doc["config"].(map[string]any)
	mounts := cfg["mounts"].([]any)
	require.Len(t, mounts, 2)
	assert.Equal(t, map[string]any{"readonly": true, "noexec": true, "nosuid": false, "nodev": false}, mounts[0].(map[string]any)["options"])
	assert.Nil(t, mounts[1].(map[string]any)["size_mib"])
	// The read-only, noexec volume is enforced in the guest.
	r := f.run("exec", "box", "--", "sh", "-c", "touch /workspace/x")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "Read-only file system")
}
