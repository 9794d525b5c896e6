package msb

import (
	"strconv"
	"strings"
)

// Args validates o and returns
//
//	create IMAGE|--conf FILE --name N [--mount-named V:G[:OPTS]]... [--copy-file SRC:DST]...
//	  [--workdir W] [--no-net]
//	  [--net-default-egress A] [--net-rule RULE]... [--secret ENV@HOSTS]...
//	  [--on-secret-violation X] [--tmpfs P[:SIZE][:OPTS]]... [--cpus N] [--memory S] [--root-disk S]
//	  [--max-duration D] [--idle-timeout D] [--security X] [--pull X] [--quiet]
//	  [--label K=V]... [--replace] [--port ADDR:HOST:GUEST[/udp]]...
//
// with unset fields omitted. The name is required: a generated one could not
// be found again by label-less callers.
func (o CreateOptions) Args() ([]string, error) {
	var source []string
	switch {
	case o.Conf != "":
		if err := checkHostFile("conf", o.Conf); err != nil {
			return nil, err
		}
		if o.Image != "" {
			// msb would take the image and ignore the file's root filesystem.
			return nil, invalid("image", o.Image, "must be empty with conf, which names the root filesystem")
		}
		source = []string{"--conf", o.Conf}
	default:
		if err := checkWord("image", o.Image); err != nil {
			return nil, err
		}
		source = []string{o.Image}
	}
	if err := ValidateName("name", o.Name); err != nil {
		return nil, err
	}
	// Ports first: a bad forward is the error to report, not the ingress
	// rule made from it.
	ports, err := checkPortForwards(o.Ports)
	if err != nil {
		return nil, err
	}
	args := append(append([]string{"create"}, source...), "--name", o.Name)
	for _, m := range o.Mounts {
		spec, err := m.spec()
		if err != nil {
			return nil, err
		}
		args = append(args, "--mount-named", spec)
	}
	for _, f := range o.CopyFiles {
		spec, err := f.spec()
		if err != nil {
			return nil, err
		}
		args = append(args, "--copy-file", spec)
	}
	if o.Workdir != "" {
		if err := checkGuestPath("workdir", o.Workdir); err != nil {
			return nil, err
		}
		args = append(args, "--workdir", o.Workdir)
	}
	if o.NoNet {
		args = append(args, "--no-net")
	}
	if o.NetDefaultEgress != "" {
		if o.NoNet {
			return nil, invalid("net default egress", o.NetDefaultEgress, "conflicts with no-net, which sets both directions (msb refuses the pair)")
		}
		if err := checkEnum("net default egress", o.NetDefaultEgress, "allow", "deny"); err != nil {
			return nil, err
		}
		args = append(args, "--net-default-egress", o.NetDefaultEgress)
	}
	for _, r := range o.NetRules {
		token, err := r.token()
		if err != nil {
			return nil, err
		}
		args = append(args, "--net-rule", token)
	}
	for _, s := range o.Secrets {
		spec, err := s.spec()
		if err != nil {
			return nil, err
		}
		args = append(args, "--secret", spec)
	}
	if o.OnSecretViolation != "" {
		if len(o.Secrets) == 0 {
			return nil, invalid("on secret violation", o.OnSecretViolation, "applies only with secrets")
		}
		if err := checkEnum("on secret violation", o.OnSecretViolation, "block", "block-and-log", "block-and-terminate", "passthrough"); err != nil {
			return nil, err
		}
		args = append(args, "--on-secret-violation", o.OnSecretViolation)
	}
	for _, t := range o.Tmpfs {
		spec, err := t.spec()
		if err != nil {
			return nil, err
		}
		args = append(args, "--tmpfs", spec)
	}
	if o.CPUs != 0 {
		// msb takes the count as an unsigned byte.
		if o.CPUs < 0 || o.CPUs > 255 {
			return nil, invalid("cpus", strconv.Itoa(o.CPUs), "must be between 1 and 255")
		}
		args = append(args, "--cpus", strconv.Itoa(o.CPUs))
	}
	for _, f := range []struct {
		flag, field, value string
		check              func(field, v string) error
	}{
		{"--memory", "memory", o.Memory, checkSize},
		{"--root-disk", "root disk", o.RootDisk, checkSize},
		{"--max-duration", "max duration", o.MaxDuration, checkDuration},
		{"--idle-timeout", "idle timeout", o.IdleTimeout, checkDuration},
	} {
		if f.value == "" {
			continue
		}
		if err := f.check(f.field, f.value); err != nil {
			return nil, err
		}
		args = append(args, f.flag, f.value)
	}
	if o.Security != "" {
		if err := checkEnum("security", o.Security, "default", "restricted"); err != nil {
			return nil, err
		}
		args = append(args, "--security", o.Security)
	}
	if o.Pull != "" {
		if err := checkEnum("pull", o.Pull, "always", "if-missing", "never"); err != nil {
			return nil, err
		}
		args = append(args, "--pull", o.Pull)
	}
	if o.Quiet {
		args = append(args, "--quiet")
	}
	for _, l := range o.Labels {
		if err := checkLabel("label", l); err != nil {
			return nil, err
		}
		args = append(args, "--label", l.Key+"="+l.Value)
	}
	if o.Replace {
		args = append(args, "--replace")
	}
	for _, s := range ports {
		args = append(args, "--port", s)
	}
	return args, nil
}

// spec renders VOLUME:GUEST[:OPTIONS].
func (m NamedMount) spec() (string, error) {
	if err := ValidateName("mount volume", m.Volume); err != nil {
		return "", err
	}
	if err := checkSpecPath("mount guest path", m.Guest); err != nil {
		return "", err
	}
	if err := checkOptions("mount option", m.Options, accessFlags, mountKeyed); err != nil {
		return "", err
	}
	spec := m.Volume + ":" + m.Guest
	if len(m.Options) > 0 {
		spec += ":" + strings.Join(m.Options, ",")
	}
	return spec, nil
}

// spec renders SRC:DST. msb splits it at the first ':' followed by '/', so
// a source holding ":/" would be cut there; it stats a relative source from
// its own working directory, so the source must be absolute.
func (f CopyFile) spec() (string, error) {
	if err := checkValue("copy-file source", f.Src); err != nil {
		return "", err
	}
	if !strings.HasPrefix(f.Src, "/") {
		return "", invalid("copy-file source", f.Src, "must be an absolute host path")
	}
	if strings.Contains(f.Src, ":/") {
		return "", invalid("copy-file source", f.Src, `must not contain ":/" (msb splits SRC:DST there)`)
	}
	if err := checkGuestPath("copy-file destination", f.Dst); err != nil {
		return "", err
	}
	if strings.HasSuffix(f.Dst, "/") {
		return "", invalid("copy-file destination", f.Dst, "must name a file, not a directory")
	}
	for _, part := range strings.Split(f.Dst[1:], "/") {
		if part == "" || part == "." || part == ".." {
			return "", invalid("copy-file destination", f.Dst, "must be a clean path (no empty, '.' or '..' components)")
		}
	}
	return f.Src + ":" + f.Dst, nil
}

// spec renders PATH[:SIZE[:OPTIONS]]. msb's grammar has no PATH::OPTIONS, so
// options need a size.
func (t Tmpfs) spec() (string, error) {
	if err := checkSpecPath("tmpfs path", t.Path); err != nil {
		return "", err
	}
	spec := t.Path
	if t.Size != "" {
		if err := checkSize("tmpfs size", t.Size); err != nil {
			return "", err
		}
		spec += ":" + t.Size
	}
	if len(t.Options) > 0 {
		if t.Size == "" {
			return "", invalid("tmpfs size", "", "must be set when options are given (msb reads PATH:SIZE:OPTIONS)")
		}
		if err := checkOptions("tmpfs option", t.Options, accessFlags, tmpfsKeyed); err != nil {
			return "", err
		}
		spec += ":" + strings.Join(t.Options, ",")
	}
	return spec, nil
}

// Args validates o and returns
//
//	modify NAME [--cpus N] [--memory SIZE] [--next-start | --restart]
//
// At least one change is required: msb takes an empty modify as a no-op.
func (o ModifyOptions) Args() ([]string, error) {
	if err := ValidateName("name", o.Name); err != nil {
		return nil, err
	}
	if o.CPUs == 0 && o.Memory == "" {
		return nil, invalid("modify", o.Name, "needs cpus or memory to change")
	}
	args := []string{"modify", o.Name}
	if o.CPUs != 0 {
		if o.CPUs < 1 || o.CPUs > 255 {
			return nil, invalid("cpus", strconv.Itoa(o.CPUs), "must be between 1 and 255")
		}
		args = append(args, "--cpus", strconv.Itoa(o.CPUs))
	}
	if o.Memory != "" {
		if err := checkSize("memory", o.Memory); err != nil {
			return nil, err
		}
		args = append(args, "--memory", o.Memory)
	}
	switch {
	case o.NextStart && o.Restart:
		return nil, invalid("modify", o.Name, "next-start and restart exclude each other (msb refuses the pair)")
	case o.NextStart:
		args = append(args, "--next-start")
	case o.Restart:
		args = append(args, "--restart")
	}
	return args, nil
}

// Args validates o and returns
//
//	exec [--stream] [--user U] [--timeout D] [--workdir W] [--env K=V]... NAME -- ARGV...
//
// The guest argv follows "--", so it may hold anything but NUL bytes.
func (o ExecOptions) Args() ([]string, error) {
	if err := ValidateName("name", o.Name); err != nil {
		return nil, err
	}
	if len(o.Argv) == 0 || o.Argv[0] == "" {
		return nil, invalid("argv", strings.Join(o.Argv, " "), "needs a command to run")
	}
	args := []string{"exec"}
	if o.Stream {
		args = append(args, "--stream")
	}
	if o.User != "" {
		if err := checkWord("user", o.User); err != nil {
			return nil, err
		}
		args = append(args, "--user", o.User)
	}
	if o.Timeout != "" {
		if err := checkDuration("timeout", o.Timeout); err != nil {
			return nil, err
		}
		args = append(args, "--timeout", o.Timeout)
	}
	if o.Workdir != "" {
		if err := checkGuestPath("workdir", o.Workdir); err != nil {
			return nil, err
		}
		args = append(args, "--workdir", o.Workdir)
	}
	for _, e := range o.Env {
		if err := checkEnv(e); err != nil {
			return nil, err
		}
		args = append(args, "--env", e)
	}
	for _, a := range o.Argv {
		if err := checkNUL("argv", a); err != nil {
			return nil, err
		}
	}
	args = append(args, o.Name, "--")
	return append(args, o.Argv...), nil
}

// CopyArgs returns `copy SRC DST`. Exactly one side must be a sandbox path
// (NAME:/absolute/path, see PathRef); the other is a host path. msb reads any
// argument whose text before the first ':' is a valid sandbox name as a
// sandbox path, so a host path of that shape needs a "./" prefix.
func CopyArgs(src, dst string) ([]string, error) {
	srcGuest, err := copyOperand("copy source", src)
	if err != nil {
		return nil, err
	}
	dstGuest, err := copyOperand("copy destination", dst)
	if err != nil {
		return nil, err
	}
	if srcGuest == dstGuest {
		return nil, invalid("copy destination", dst, "exactly one of source and destination must be a sandbox path NAME:/path")
	}
	return []string{"copy", src, dst}, nil
}

// copyOperand validates one side of a copy and reports whether msb will
// read it as a sandbox path.
func copyOperand(field, p string) (guest bool, err error) {
	if err := checkValue(field, p); err != nil {
		return false, err
	}
	name, path, ok := strings.Cut(p, ":")
	if !ok || ValidateName(field, name) != nil {
		return false, nil
	}
	return true, checkGuestPath(field, path)
}

// PathRef returns NAME:/abs/path, the sandbox side of a copy.
func PathRef(name, guestPath string) (string, error) {
	if err := ValidateName("name", name); err != nil {
		return "", err
	}
	if err := checkGuestPath("guest path", guestPath); err != nil {
		return "", err
	}
	return name + ":" + guestPath, nil
}

// Args validates o and returns `stop [--force] [--timeout N] NAMES...`.
func (o StopOptions) Args() ([]string, error) {
	if err := validateNames("name", o.Names); err != nil {
		return nil, err
	}
	args := []string{"stop"}
	if o.Force {
		args = append(args, "--force")
	}
	if o.Timeout < 0 {
		return nil, invalid("stop timeout", strconv.Itoa(o.Timeout), "must not be negative")
	}
	if o.Timeout > 0 {
		args = append(args, "--timeout", strconv.Itoa(o.Timeout))
	}
	return append(args, o.Names...), nil
}

// StartArgs returns `start NAMES...`.
func StartArgs(names ...string) ([]string, error) {
	if err := validateNames("name", names); err != nil {
		return nil, err
	}
	return append([]string{"start"}, names...), nil
}

// Args validates o and returns `remove [--force] NAMES...`.
func (o RemoveOptions) Args() ([]string, error) {
	if err := validateNames("name", o.Names); err != nil {
		return nil, err
	}
	args := []string{"remove"}
	if o.Force {
		args = append(args, "--force")
	}
	return append(args, o.Names...), nil
}

// Args validates o and returns
// `list --format json [--label K=V]... [--running] [--stopped]`.
func (o ListOptions) Args() ([]string, error) {
	args := []string{"list", "--format", "json"}
	for _, l := range o.Labels {
		if err := checkLabel("label filter", l); err != nil {
			return nil, err
		}
		args = append(args, "--label", l.Key+"="+l.Value)
	}
	if o.Running {
		args = append(args, "--running")
	}
	if o.Stopped {
		args = append(args, "--stopped")
	}
	return args, nil
}

// InspectArgs returns `inspect NAME --format json`.
func InspectArgs(name string) ([]string, error) {
	if err := ValidateName("name", name); err != nil {
		return nil, err
	}
	return []string{"inspect", name, "--format", "json"}, nil
}

// Args validates o and returns `volume create --name V [--kind K] [--size S]`.
func (o VolumeCreateOptions) Args() ([]string, error) {
	if err := ValidateName("volume name", o.Name); err != nil {
		return nil, err
	}
	args := []string{"volume", "create", "--name", o.Name}
	if o.Kind != "" {
		if err := checkEnum("volume kind", o.Kind, "dir", "disk"); err != nil {
			return nil, err
		}
		args = append(args, "--kind", o.Kind)
	}
	if o.Size != "" {
		if o.Kind != "disk" {
			return nil, invalid("volume size", o.Size, "applies only to kind disk")
		}
		if err := checkSize("volume size", o.Size); err != nil {
			return nil, err
		}
		args = append(args, "--size", o.Size)
	}
	return args, nil
}

// VolumeRemoveArgs returns `volume remove V...`.
func VolumeRemoveArgs(names ...string) ([]string, error) {
	if err := validateNames("volume name", names); err != nil {
		return nil, err
	}
	return append([]string{"volume", "remove"}, names...), nil
}

// VolumeListArgs returns `volume list --format json`.
func VolumeListArgs() []string { return []string{"volume", "list", "--format", "json"} }

// VolumeInspectArgs returns `volume inspect V`. Its output is text only.
func VolumeInspectArgs(name string) ([]string, error) {
	if err := ValidateName("volume name", name); err != nil {
		return nil, err
	}
	return []string{"volume", "inspect", name}, nil
}
