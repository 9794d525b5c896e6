//go:build linux

package local

import (
	"slices"
	"strings"
	"testing"
)

func TestBwrapArgv(t *testing.T) {
	base := bwrapSpec{
		Mode: ModeWorkspaceWrite, Network: NetworkDeny,
		Workspace: "/s/ws", Uploads: "/s/up", Outputs: "/s/out", Workdir: "/workspace/sub",
		Env:     []string{"HOME=/workspace", "PATH=/usr/bin:/bin"},
		System:  []hostEntry{{Path: "/bin", Target: "usr/bin"}, {Path: "/lib64"}},
		Command: []string{"/bin/bash", "-c", "echo hi", "bash"},
	}
	unprivileged := strings.Join(base.args(), " ")
	want := "--die-with-parent --new-session --unshare-pid --unshare-ipc --unshare-uts --hostname oma-sandbox --unshare-net" +
		" --unshare-user --disable-userns --uid 65534 --gid 65534 --clearenv --tmpfs /" +
		" --ro-bind /usr /usr --ro-bind /etc /etc --symlink usr/bin /bin --ro-bind /lib64 /lib64" +
		" --proc /proc --dev /dev --perms 1777 --size 67108864 --tmpfs /tmp --dir /mnt --dir /mnt/session" +
		" --bind /s/ws /workspace --ro-bind /s/up /mnt/session/uploads --bind /s/out /mnt/session/outputs" +
		" --remount-ro / --setenv HOME /workspace --setenv PATH /usr/bin:/bin --chdir /workspace/sub -- /bin/bash -c echo hi bash"
	if unprivileged != want {
		t.Fatalf("unprivileged argv\n got %s\nwant %s", unprivileged, want)
	}

	priv := base
	priv.Privileged, priv.Setpriv = true, "/usr/bin/setpriv"
	got := priv.args()
	tail := []string{"--chdir", "/workspace/sub", "--", "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--", "/bin/bash", "-c", "echo hi", "bash"}
	if !slices.Equal(got[len(got)-len(tail):], tail) || slices.Contains(got, "--unshare-user") ||
		!containsSeq(got, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP") {
		t.Fatalf("privileged argv: %q", got)
	}

	root := priv
	root.Root = true
	got = root.args()
	if slices.Contains(got, "/usr/bin/setpriv") || !containsSeq(got, "--bind", "/s/up", "/mnt/session/uploads") ||
		!containsSeq(got, "--cap-drop", "ALL", "--cap-add", "CAP_CHOWN", "--cap-add", "CAP_DAC_OVERRIDE", "--cap-add", "CAP_FOWNER") {
		t.Fatalf("root argv: %q", got)
	}

	// A resident sandbox keeps its agent no capability but what it needs
	// to keep out of its commands' reach: as root, to map its own user
	// namespace; as another user, to start its commands' namespaces.
	resident := base
	resident.Resident = true
	got = resident.args()
	if slices.Contains(got, "--die-with-parent") ||
		!containsSeq(got, "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL", "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SYS_CHROOT", "--clearenv") {
		t.Fatalf("unprivileged resident argv: %q", got)
	}
	resident.Privileged = true
	got = resident.args()
	if slices.Contains(got, "--unshare-user") || slices.Contains(got, "/usr/bin/setpriv") ||
		!containsSeq(got, "--hostname", "oma-sandbox", "--unshare-net", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--clearenv") {
		t.Fatalf("privileged resident argv: %q", got)
	}

	withAgent := base
	withAgent.Agent = "/c/agent"
	got = withAgent.args()
	if !containsSeq(got, "--dir", "/.oma-sandbox", "--ro-bind", "/c/agent", "/.oma-sandbox/agent", "--remount-ro", "/") {
		t.Fatalf("the agent is not bound read-only (into a directory others can enter): %q", got)
	}

	ro := base
	ro.Mode = ModeReadOnly
	got = ro.args()
	if !containsSeq(got, "--ro-bind", "/s/ws", "/workspace") || !containsSeq(got, "--ro-bind", "/s/out", "/mnt/session/outputs") {
		t.Fatalf("read-only argv: %q", got)
	}

	open := base
	open.Network = NetworkUnrestricted
	if slices.Contains(open.args(), "--unshare-net") {
		t.Fatal("unrestricted network unshared")
	}

	danger := base
	danger.Mode = ModeDangerFullAccess
	danger.System = []hostEntry{{Path: "/home"}, {Path: "/bin", Target: "usr/bin"}}
	got = danger.args()
	if slices.Contains(got, "--unshare-net") || !containsSeq(got, "--bind", "/home", "/home") ||
		!containsSeq(got, "--dev-bind", "/dev", "/dev") || slices.Contains(got, "/etc") {
		t.Fatalf("danger argv: %q", got)
	}
}

func containsSeq(s []string, seq ...string) bool {
	for i := 0; i+len(seq) <= len(s); i++ {
		if slices.Equal(s[i:i+len(seq)], seq) {
			return true
		}
	}
	return false
}
