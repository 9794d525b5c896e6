package msb

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestBuildersExactArgv(t *testing.T) {
	fields := strings.Fields
	full := CreateOptions{
		Image: "alpine:3.20",
		Name:  "oma-ws-s1",
		Mounts: []NamedMount{
			{Volume: "oma-ws-s1-vol", Guest: "/workspace"},
			{Volume: "cache", Guest: "/cache", Options: []string{"ro", "kind=disk", "size=1G", "quota=512M"}},
		},
		CopyFiles: []CopyFile{{Src: "/var/cache/agent", Dst: "/.oma-sandbox/agent"}, {Src: "/h/a:b", Dst: "/etc/a:b"}},
		Workdir:   "/workspace",
		NoNet:     true,
		Tmpfs: []Tmpfs{
			{Path: "/mnt/session/uploads", Size: "256M", Options: []string{"nosuid", "nodev", "noexec"}},
			{Path: "/tmp"},
			{Path: "/mnt/out", Size: "1.5G"},
		},
		CPUs:        2,
		Memory:      "1G",
		RootDisk:    "4G",
		MaxDuration: "2h",
		IdleTimeout: "300",
		Security:    "restricted",
		Pull:        "if-missing",
		Quiet:       true,
		Labels:      []Label{{"oma.workspace", "ws"}, {"oma.empty", ""}},
		Replace:     true,
	}
	tests := []struct {
		name  string
		build func() ([]string, error)
		want  []string
	}{
		{"create minimal", CreateOptions{Image: "alpine", Name: "box1"}.Args,
			fields("create alpine --name box1")},
		{"create full", full.Args,
			fields("create alpine:3.20 --name oma-ws-s1 --mount-named oma-ws-s1-vol:/workspace --mount-named cache:/cache:ro,kind=disk,size=1G,quota=512M " +
				"--copy-file /var/cache/agent:/.oma-sandbox/agent --copy-file /h/a:b:/etc/a:b --workdir /workspace --no-net --tmpfs /mnt/session/uploads:256M:nosuid,nodev,noexec --tmpfs /tmp --tmpfs /mnt/out:1.5G " +
				"--cpus 2 --memory 1G --root-disk 4G --max-duration 2h --idle-timeout 300 --security restricted --pull if-missing --quiet " +
				"--label oma.workspace=ws --label oma.empty= --replace")},
		{"exec minimal", ExecOptions{Name: "box1", Argv: []string{"true"}}.Args,
			fields("exec box1 -- true")},
		{"exec full", ExecOptions{
			Name: "box1", Argv: []string{"/bin/bash", "-lc", "echo hi", "--", "-x"}, Stream: true, User: "1000:1000",
			Timeout: "30s", Workdir: "/workspace", Env: []string{"A=1", "B=", "C=x=y"},
		}.Args,
			[]string{"exec", "--stream", "--user", "1000:1000", "--timeout", "30s", "--workdir", "/workspace",
				"--env", "A=1", "--env", "B=", "--env", "C=x=y", "box1", "--", "/bin/bash", "-lc", "echo hi", "--", "-x"}},
		{"copy in", func() ([]string, error) { return CopyArgs("./a:b.txt", "box1:/workspace/a") },
			fields("copy ./a:b.txt box1:/workspace/a")},
		{"copy out", func() ([]string, error) { return CopyArgs("box1:/workspace/out", "/tmp/out") },
			fields("copy box1:/workspace/out /tmp/out")},
		{"stop", StopOptions{Names: []string{"a", "b"}}.Args, fields("stop a b")},
		{"stop full", StopOptions{Names: []string{"a"}, Force: true, Timeout: 5}.Args, fields("stop --force --timeout 5 a")},
		{"start", func() ([]string, error) { return StartArgs("a", "b") }, fields("start a b")},
		{"remove", RemoveOptions{Names: []string{"a"}}.Args, fields("remove a")},
		{"remove force", RemoveOptions{Names: []string{"a", "b"}, Force: true}.Args, fields("remove --force a b")},
		{"list", ListOptions{}.Args, fields("list --format json")},
		{"list full", ListOptions{Labels: []Label{{"oma.session", "s1"}, {"oma.kind", ""}}, Running: true, Stopped: true}.Args,
			fields("list --format json --label oma.session=s1 --label oma.kind= --running --stopped")},
		{"inspect", func() ([]string, error) { return InspectArgs("box1") }, fields("inspect box1 --format json")},
		{"volume create", VolumeCreateOptions{Name: "v1"}.Args, fields("volume create --name v1")},
		{"volume create dir", VolumeCreateOptions{Name: "v1", Kind: "dir"}.Args, fields("volume create --name v1 --kind dir")},
		{"volume create disk", VolumeCreateOptions{Name: "v1", Kind: "disk", Size: "2G"}.Args,
			fields("volume create --name v1 --kind disk --size 2G")},
		{"volume remove", func() ([]string, error) { return VolumeRemoveArgs("v1", "v2") }, fields("volume remove v1 v2")},
		{"volume list", func() ([]string, error) { return VolumeListArgs(), nil }, fields("volume list --format json")},
		{"volume inspect", func() ([]string, error) { return VolumeInspectArgs("v1") }, fields("volume inspect v1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.build()
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("argv mismatch\n got: %q\nwant: %q", got, tt.want)
			}
		})
	}
}

func TestPathRef(t *testing.T) {
	got, err := PathRef("box1", "/workspace/a b")
	if err != nil || got != "box1:/workspace/a b" {
		t.Fatalf("PathRef = %q, %v", got, err)
	}
	for _, c := range []struct{ name, path string }{
		{"", "/x"}, {"-box", "/x"}, {"box1", "rel"}, {"box1", ""}, {"box1", "/a\x00b"},
	} {
		if _, err := PathRef(c.name, c.path); !errors.Is(err, ErrInvalid) {
			t.Errorf("PathRef(%q, %q) = %v, want ErrInvalid", c.name, c.path, err)
		}
	}
}

func TestBuilderRefusals(t *testing.T) {
	ok := CreateOptions{Image: "alpine", Name: "box1"}
	with := func(f func(*CreateOptions)) func() ([]string, error) {
		o := ok
		f(&o)
		return o.Args
	}
	okExec := ExecOptions{Name: "box1", Argv: []string{"true"}}
	withExec := func(f func(*ExecOptions)) func() ([]string, error) {
		o := okExec
		f(&o)
		return o.Args
	}
	long := strings.Repeat("a", 129)
	tests := []struct {
		name  string
		build func() ([]string, error)
		field string
	}{
		{"empty image", with(func(o *CreateOptions) { o.Image = "" }), "image"},
		{"flag image", with(func(o *CreateOptions) { o.Image = "--privileged" }), "image"},
		{"space image", with(func(o *CreateOptions) { o.Image = "alpine latest" }), "image"},
		{"NUL image", with(func(o *CreateOptions) { o.Image = "alp\x00ine" }), "image"},
		{"missing name", with(func(o *CreateOptions) { o.Name = "" }), "name"},
		{"long name", with(func(o *CreateOptions) { o.Name = long }), "name"},
		{"bad name char", with(func(o *CreateOptions) { o.Name = "box/1" }), "name"},
		{"name leading dot", with(func(o *CreateOptions) { o.Name = ".box" }), "name"},
		{"flag name", with(func(o *CreateOptions) { o.Name = "-box" }), "name"},
		{"mount volume", with(func(o *CreateOptions) { o.Mounts = []NamedMount{{Volume: "-v", Guest: "/w"}} }), "mount volume"},
		{"mount relative", with(func(o *CreateOptions) { o.Mounts = []NamedMount{{Volume: "v", Guest: "w"}} }), "mount guest path"},
		{"mount colon", with(func(o *CreateOptions) { o.Mounts = []NamedMount{{Volume: "v", Guest: "/w:ro"}} }), "mount guest path"},
		{"copy-file empty source", with(func(o *CreateOptions) { o.CopyFiles = []CopyFile{{Dst: "/a"}} }), "copy-file source"},
		{"copy-file relative source", with(func(o *CreateOptions) { o.CopyFiles = []CopyFile{{Src: "a.bin", Dst: "/a"}} }), "copy-file source"},
		{"copy-file flag source", with(func(o *CreateOptions) { o.CopyFiles = []CopyFile{{Src: "-a", Dst: "/a"}} }), "copy-file source"},
		{"copy-file source with :/", with(func(o *CreateOptions) { o.CopyFiles = []CopyFile{{Src: "/h/a:/b", Dst: "/a"}} }), "copy-file source"},
		{"copy-file NUL source", with(func(o *CreateOptions) { o.CopyFiles = []CopyFile{{Src: "/a\x00", Dst: "/a"}} }), "copy-file source"},
		{"copy-file relative destination", with(func(o *CreateOptions) { o.CopyFiles = []CopyFile{{Src: "/a", Dst: "a"}} }), "copy-file destination"},
		{"copy-file root destination", with(func(o *CreateOptions) { o.CopyFiles = []CopyFile{{Src: "/a", Dst: "/"}} }), "copy-file destination"},
		{"copy-file directory destination", with(func(o *CreateOptions) { o.CopyFiles = []CopyFile{{Src: "/a", Dst: "/opt/"}} }), "copy-file destination"},
		{"copy-file dotdot destination", with(func(o *CreateOptions) { o.CopyFiles = []CopyFile{{Src: "/a", Dst: "/opt/../etc/x"}} }), "copy-file destination"},
		{"copy-file NUL destination", with(func(o *CreateOptions) { o.CopyFiles = []CopyFile{{Src: "/a", Dst: "/a\x00"}} }), "copy-file destination"},
		{"mount option", with(func(o *CreateOptions) { o.Mounts = []NamedMount{{Volume: "v", Guest: "/w", Options: []string{"exec"}}} }), "mount option"},
		{"mount option comma", with(func(o *CreateOptions) {
			o.Mounts = []NamedMount{{Volume: "v", Guest: "/w", Options: []string{"ro,rw"}}}
		}), "mount option"},
		{"mount kind", with(func(o *CreateOptions) {
			o.Mounts = []NamedMount{{Volume: "v", Guest: "/w", Options: []string{"kind=file"}}}
		}), "mount option kind"},
		{"mount quota", with(func(o *CreateOptions) {
			o.Mounts = []NamedMount{{Volume: "v", Guest: "/w", Options: []string{"quota=1Gi"}}}
		}), "mount option quota"},
		{"workdir relative", with(func(o *CreateOptions) { o.Workdir = "workspace" }), "workdir"},
		{"workdir flag", with(func(o *CreateOptions) { o.Workdir = "--no-net" }), "workdir"},
		{"tmpfs relative", with(func(o *CreateOptions) { o.Tmpfs = []Tmpfs{{Path: "tmp"}} }), "tmpfs path"},
		{"tmpfs colon", with(func(o *CreateOptions) { o.Tmpfs = []Tmpfs{{Path: "/a:b"}} }), "tmpfs path"},
		{"tmpfs size", with(func(o *CreateOptions) { o.Tmpfs = []Tmpfs{{Path: "/t", Size: "64K"}} }), "tmpfs size"},
		{"tmpfs options without size", with(func(o *CreateOptions) { o.Tmpfs = []Tmpfs{{Path: "/t", Options: []string{"ro"}}} }), "tmpfs size"},
		{"tmpfs option", with(func(o *CreateOptions) { o.Tmpfs = []Tmpfs{{Path: "/t", Size: "1M", Options: []string{"kind=dir"}}} }), "tmpfs option"},
		{"tmpfs option size", with(func(o *CreateOptions) { o.Tmpfs = []Tmpfs{{Path: "/t", Size: "1M", Options: []string{"size=0"}}} }), "tmpfs option size"},
		{"negative cpus", with(func(o *CreateOptions) { o.CPUs = -1 }), "cpus"},
		{"too many cpus", with(func(o *CreateOptions) { o.CPUs = 256 }), "cpus"},
		{"memory Gi", with(func(o *CreateOptions) { o.Memory = "1Gi" }), "memory"},
		{"memory GB", with(func(o *CreateOptions) { o.Memory = "1GB" }), "memory"},
		{"memory zero", with(func(o *CreateOptions) { o.Memory = "0" }), "memory"},
		{"root disk K", with(func(o *CreateOptions) { o.RootDisk = "512K" }), "root disk"},
		{"max duration ms", with(func(o *CreateOptions) { o.MaxDuration = "500ms" }), "max duration"},
		{"idle timeout compound", with(func(o *CreateOptions) { o.IdleTimeout = "1h30m" }), "idle timeout"},
		{"security", with(func(o *CreateOptions) { o.Security = "none" }), "security"},
		{"pull", with(func(o *CreateOptions) { o.Pull = "missing" }), "pull"},
		{"label empty key", with(func(o *CreateOptions) { o.Labels = []Label{{"", "v"}} }), "label key"},
		{"label key with =", with(func(o *CreateOptions) { o.Labels = []Label{{"a=b", "v"}} }), "label key"},
		{"label flag key", with(func(o *CreateOptions) { o.Labels = []Label{{"-k", "v"}} }), "label key"},
		{"label reserved sandbox.", with(func(o *CreateOptions) { o.Labels = []Label{{"sandbox.id", "v"}} }), "label key"},
		{"label reserved microsandbox.", with(func(o *CreateOptions) { o.Labels = []Label{{"microsandbox.x", "v"}} }), "label key"},
		{"label reserved service.", with(func(o *CreateOptions) { o.Labels = []Label{{"service.name", "v"}} }), "label key"},
		{"label flag value", with(func(o *CreateOptions) { o.Labels = []Label{{"k", "-v"}} }), "label value"},
		{"label NUL value", with(func(o *CreateOptions) { o.Labels = []Label{{"k", "a\x00"}} }), "label value"},

		{"exec name", withExec(func(o *ExecOptions) { o.Name = "" }), "name"},
		{"exec empty argv", withExec(func(o *ExecOptions) { o.Argv = nil }), "argv"},
		{"exec empty command", withExec(func(o *ExecOptions) { o.Argv = []string{""} }), "argv"},
		{"exec NUL argv", withExec(func(o *ExecOptions) { o.Argv = []string{"echo", "a\x00b"} }), "argv"},
		{"exec flag user", withExec(func(o *ExecOptions) { o.User = "-root" }), "user"},
		{"exec timeout d", withExec(func(o *ExecOptions) { o.Timeout = "1d" }), "timeout"},
		{"exec timeout zero", withExec(func(o *ExecOptions) { o.Timeout = "0s" }), "timeout"},
		{"exec workdir relative", withExec(func(o *ExecOptions) { o.Workdir = "w" }), "workdir"},
		{"exec env bare", withExec(func(o *ExecOptions) { o.Env = []string{"SECRET"} }), "env entry"},
		{"exec env empty key", withExec(func(o *ExecOptions) { o.Env = []string{"=v"} }), "env entry"},
		{"exec env flag", withExec(func(o *ExecOptions) { o.Env = []string{"--privileged=1"} }), "env entry"},
		{"exec env NUL", withExec(func(o *ExecOptions) { o.Env = []string{"A=\x00"} }), "env entry"},

		{"copy flag src", func() ([]string, error) { return CopyArgs("-r", "box1:/x") }, "copy source"},
		{"copy empty dst", func() ([]string, error) { return CopyArgs("box1:/x", "") }, "copy destination"},
		{"copy both host", func() ([]string, error) { return CopyArgs("./a", "/b") }, "copy destination"},
		{"copy both guest", func() ([]string, error) { return CopyArgs("a:/x", "b:/y") }, "copy destination"},
		{"copy relative guest", func() ([]string, error) { return CopyArgs("box1:x", "/tmp/x") }, "copy source"},
		{"copy NUL", func() ([]string, error) { return CopyArgs("/tmp/\x00", "box1:/x") }, "copy source"},

		{"stop no names", StopOptions{}.Args, "name"},
		{"stop bad name", StopOptions{Names: []string{"ok", "no way"}}.Args, "name"},
		{"stop negative timeout", StopOptions{Names: []string{"a"}, Timeout: -1}.Args, "stop timeout"},
		{"start no names", func() ([]string, error) { return StartArgs() }, "name"},
		{"remove bad name", RemoveOptions{Names: []string{"--all"}}.Args, "name"},
		{"list reserved label", ListOptions{Labels: []Label{{"sandbox.x", "1"}}}.Args, "label filter key"},
		{"list flag value", ListOptions{Labels: []Label{{"k", "--all"}}}.Args, "label filter value"},
		{"inspect bad name", func() ([]string, error) { return InspectArgs("a b") }, "name"},
		{"volume create name", VolumeCreateOptions{Name: "-v"}.Args, "volume name"},
		{"volume create kind", VolumeCreateOptions{Name: "v", Kind: "file"}.Args, "volume kind"},
		{"volume size without disk", VolumeCreateOptions{Name: "v", Size: "1G"}.Args, "volume size"},
		{"volume size bad", VolumeCreateOptions{Name: "v", Kind: "disk", Size: "1T"}.Args, "volume size"},
		{"volume remove none", func() ([]string, error) { return VolumeRemoveArgs() }, "volume name"},
		{"volume inspect bad", func() ([]string, error) { return VolumeInspectArgs("") }, "volume name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := tt.build()
			if err == nil {
				t.Fatalf("accepted: %q", args)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v (%T) is not a ValidationError matching ErrInvalid", err, err)
			}
			if ve.Field != tt.field {
				t.Errorf("field = %q, want %q (error: %v)", ve.Field, tt.field, err)
			}
			if args != nil {
				t.Errorf("argv %q returned with an error", args)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("message %q does not name the field %q", err, tt.field)
			}
		})
	}
}

func TestValidateName(t *testing.T) {
	for _, good := range []string{"a", "A9", "0box", "box.1_x-y", strings.Repeat("z", 128)} {
		if err := ValidateName("name", good); err != nil {
			t.Errorf("ValidateName(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "_a", "a b", "a/b", "a:b", "ä", strings.Repeat("z", 129), "a\x00"} {
		err := ValidateName("sandbox", bad)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalid", bad, err)
			continue
		}
		if !strings.Contains(err.Error(), "sandbox") {
			t.Errorf("error %q does not name the field", err)
		}
	}
}
