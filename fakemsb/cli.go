//go:build linux

package main

import (
	"fmt"
	"strings"
)

// opt is one flag of a subcommand. An empty val means a boolean flag.
type opt struct {
	long   string
	short  byte
	val    string
	multi  bool
	hidden bool
}

// param is one positional argument.
type param struct {
	name     string
	required bool
	multi    bool
}

// spec describes a subcommand's command line the way clap would parse it.
type spec struct {
	path   string // "create", "volume create"
	usage  string // after "Usage: "
	opts   []opt
	params []param
	// last names the argv that must follow "--" (exec's COMMAND); "" when
	// "--" only ends option parsing.
	last string
}

// parsed holds one parsed command line.
type parsed struct {
	spec   *spec
	vals   map[string][]string
	pos    map[string][]string
	last   []string
	dashed bool // "--" was given
}

func (p *parsed) has(long string) bool { _, ok := p.vals[long]; return ok }

func (p *parsed) str(long string) string {
	if v := p.vals[long]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

func (p *parsed) arg(name string) string {
	if v := p.pos[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func usageTail(usage string) string {
	return "\nUsage: " + usage + "\n\nFor more information, try '--help'.\n"
}

// usageError is a clap-style command line error: exit code 2.
func (s *spec) usageError(format string, a ...any) error {
	return &exitError{code: 2, msg: "error: " + fmt.Sprintf(format, a...) + "\n" + usageTail(s.usage)}
}

func (o *opt) display() string {
	if o.val == "" {
		return "--" + o.long
	}
	return "--" + o.long + " <" + o.val + ">"
}

// invalidValue reports a value refused by a flag's value parser: clap
// prints no usage line for it.
func (s *spec) invalidValue(o *opt, v, reason string) error {
	return &exitError{code: 2, msg: fmt.Sprintf("error: invalid value '%s' for '%s': %s\n\nFor more information, try '--help'.\n", v, o.display(), reason)}
}

func (s *spec) invalidFlag(long, v, reason string) error {
	return s.invalidValue(s.findLong(long), v, reason)
}

func (s *spec) findLong(name string) *opt {
	for i := range s.opts {
		if s.opts[i].long == name {
			return &s.opts[i]
		}
	}
	return nil
}

func (s *spec) findShort(c byte) *opt {
	for i := range s.opts {
		if s.opts[i].short == c {
			return &s.opts[i]
		}
	}
	return nil
}

// unexpected is clap's refusal of an argument. It suggests "--" only for a
// flag-like word given to a command that takes positional arguments.
func unexpected(s *spec, a string) error {
	tip := ""
	if strings.HasPrefix(a, "-") && (len(s.params) > 0 || s.last != "") {
		tip = fmt.Sprintf("\n  tip: to pass '%s' as a value, use '-- %s'\n", a, a)
	}
	return &exitError{code: 2, msg: fmt.Sprintf("error: unexpected argument '%s' found\n%s%s", a, tip, usageTail(s.usage))}
}

// valueNext reports whether args[i+1] can be a flag's value: like clap,
// a following flag-like word is not taken as a value.
func valueNext(args []string, i int) bool {
	return i+1 < len(args) && (len(args[i+1]) < 2 || args[i+1][0] != '-')
}

// parse parses args (after the subcommand words) against s.
func (s *spec) parse(args []string) (*parsed, error) {
	p := &parsed{spec: s, vals: map[string][]string{}, pos: map[string][]string{}}
	var positional []string
	set := func(o *opt, v string) error {
		if _, dup := p.vals[o.long]; dup && !o.multi {
			return s.usageError("the argument '%s' cannot be used multiple times", o.display())
		}
		p.vals[o.long] = append(p.vals[o.long], v)
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			p.dashed = true
			if s.last != "" {
				p.last = append([]string(nil), args[i+1:]...)
			} else {
				positional = append(positional, args[i+1:]...)
			}
			i = len(args)
		case a == "--help" || a == "-h":
			return nil, &exitError{code: 0, out: "Usage: " + s.usage + "\n"}
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o := s.findLong(name)
			if o == nil {
				return nil, unexpected(s, "--"+name)
			}
			if o.val == "" {
				if hasVal {
					return nil, s.usageError("unexpected value '%s' for '%s' found; no more were expected", val, o.display())
				}
				if err := set(o, ""); err != nil {
					return nil, err
				}
				continue
			}
			if !hasVal {
				if !valueNext(args, i) {
					return nil, s.usageError("a value is required for '%s' but none was supplied", o.display())
				}
				i++
				val = args[i]
			}
			if err := set(o, val); err != nil {
				return nil, err
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				o := s.findShort(a[j])
				if o == nil {
					return nil, unexpected(s, "-"+string(a[j]))
				}
				if o.val == "" {
					if err := set(o, ""); err != nil {
						return nil, err
					}
					continue
				}
				val := strings.TrimPrefix(a[j+1:], "=")
				if j+1 == len(a) {
					if !valueNext(args, i) {
						return nil, s.usageError("a value is required for '%s' but none was supplied", o.display())
					}
					i++
					val = args[i]
				}
				if err := set(o, val); err != nil {
					return nil, err
				}
				break
			}
		default:
			positional = append(positional, a)
		}
	}
	k := 0
	for _, prm := range s.params {
		switch {
		case prm.multi:
			p.pos[prm.name] = positional[k:]
			k = len(positional)
		case k < len(positional):
			p.pos[prm.name] = positional[k : k+1]
			k++
		}
	}
	if k < len(positional) {
		return nil, unexpected(s, positional[k])
	}
	var missing []string
	for _, prm := range s.params {
		if prm.required && len(p.pos[prm.name]) == 0 {
			m := "  <" + prm.name + ">"
			if prm.multi {
				m += "..."
			}
			missing = append(missing, m)
		}
	}
	if s.last != "" && len(p.last) == 0 {
		missing = append(missing, "  <"+s.last+">...")
	}
	if len(missing) > 0 {
		return nil, &exitError{code: 2, msg: "error: the following required arguments were not provided:\n" + strings.Join(missing, "\n") + "\n" + usageTail(s.usage)}
	}
	return p, nil
}

// requireOneOf fails like clap's required_unless_present when neither the
// positional nor the flag was given.
func (p *parsed) requireOneOf(param, flag string) error {
	if len(p.pos[param]) > 0 || p.has(flag) {
		return nil
	}
	return &exitError{code: 2, msg: "error: the following required arguments were not provided:\n  <" + param + ">...\n" + usageTail(p.spec.usage)}
}

// oneOf checks a value against clap's possible values.
func (p *parsed) oneOf(long string, allowed ...string) error {
	if !p.has(long) {
		return nil
	}
	v := p.str(long)
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	o := p.spec.findLong(long)
	return &exitError{code: 2, msg: fmt.Sprintf("error: invalid value '%s' for '%s'\n  [possible values: %s]\n%s", v, o.display(), strings.Join(allowed, ", "), usageTail(p.spec.usage))}
}

var (
	qOpt     = opt{long: "quiet", short: 'q'}
	labelOpt = opt{long: "label", val: "LABEL", multi: true}
)

var specs = []*spec{
	{path: "create", usage: "msb create [OPTIONS] [IMAGE]", params: []param{{name: "IMAGE"}}, opts: []opt{
		{long: "conf", val: "PATH"},
		{long: "name", short: 'n', val: "NAME"},
		{long: "mount-named", val: "MOUNT", multi: true},
		{long: "copy-file", val: "SRC:DST", multi: true},
		{long: "workdir", short: 'w', val: "WORKDIR"},
		{long: "no-net"},
		{long: "net-rule", val: "TOKENS", multi: true},
		{long: "net-default-egress", val: "ACTION"},
		{long: "secret", val: "SECRET", multi: true},
		{long: "on-secret-violation", val: "ON_SECRET_VIOLATION"},
		{long: "tmpfs", val: "TMPFS", multi: true},
		{long: "cpus", short: 'c', val: "CPUS"},
		{long: "memory", short: 'm', val: "MEMORY"},
		{long: "root-disk", val: "SIZE"},
		{long: "oci-upper-size", val: "SIZE", hidden: true},
		{long: "max-duration", val: "DURATION"},
		{long: "idle-timeout", val: "DURATION"},
		{long: "security", val: "SECURITY"},
		{long: "pull", val: "PULL"},
		qOpt,
		{long: "label", val: "LABEL", multi: true},
		{long: "replace"},
		{long: "port", short: 'p', val: "PORT", multi: true},
	}},
	{path: "exec", usage: "msb exec [OPTIONS] <NAME> -- <COMMAND>...", params: []param{{name: "NAME", required: true}}, last: "COMMAND", opts: []opt{
		{long: "stream"},
		{long: "user", short: 'u', val: "USER"},
		{long: "timeout", val: "DURATION"},
		{long: "workdir", short: 'w', val: "WORKDIR"},
		{long: "env", short: 'e', val: "ENV", multi: true},
		{long: "tty", short: 't'},
		{long: "no-tty"},
		{long: "rlimit", val: "RLIMIT", multi: true},
		qOpt,
	}},
	{path: "copy", usage: "msb copy [OPTIONS] <SRC> <DST>", params: []param{{name: "SRC", required: true}, {name: "DST", required: true}}, opts: []opt{qOpt}},
	{path: "stop", usage: "msb stop [OPTIONS] [NAMES]...", params: []param{{name: "NAMES", multi: true}}, opts: []opt{
		labelOpt, {long: "force", short: 'f'}, {long: "timeout", short: 't', val: "TIMEOUT"}, qOpt,
	}},
	{path: "modify", usage: "msb modify [OPTIONS] <NAME>", params: []param{{name: "NAME", required: true}}, opts: []opt{
		{long: "cpus", val: "CPUS"}, {long: "memory", val: "MEMORY"}, {long: "next-start"}, {long: "restart"},
	}},
	{path: "start", usage: "msb start [OPTIONS] [NAMES]...", params: []param{{name: "NAMES", multi: true}}, opts: []opt{labelOpt, qOpt}},
	{path: "remove", usage: "msb remove [OPTIONS] [NAMES]...", params: []param{{name: "NAMES", multi: true}}, opts: []opt{
		labelOpt, {long: "force", short: 'f'}, qOpt,
	}},
	{path: "list", usage: "msb list [OPTIONS]", opts: []opt{
		{long: "format", val: "FORMAT"}, labelOpt, {long: "running"}, {long: "stopped"}, qOpt,
	}},
	{path: "metrics", usage: "msb metrics [OPTIONS] [NAME]", params: []param{{name: "NAME"}}, opts: []opt{{long: "format", val: "FORMAT"}}},
	{path: "inspect", usage: "msb inspect [OPTIONS] <NAME>", params: []param{{name: "NAME", required: true}}, opts: []opt{{long: "format", val: "FORMAT"}}},
	{path: "volume create", usage: "msb volume create [OPTIONS] [NAME]", params: []param{{name: "NAME"}}, opts: []opt{
		{long: "name", val: "NAME"}, {long: "kind", val: "KIND"}, {long: "size", val: "SIZE"}, qOpt,
	}},
	{path: "volume remove", usage: "msb volume remove [OPTIONS] <NAMES>...", params: []param{{name: "NAMES", required: true, multi: true}}, opts: []opt{qOpt}},
	{path: "volume list", usage: "msb volume list [OPTIONS]", opts: []opt{{long: "format", val: "FORMAT"}, qOpt}},
	{path: "volume inspect", usage: "msb volume inspect <NAME>", params: []param{{name: "NAME", required: true}}},
	{path: "image inspect", usage: "msb image inspect [OPTIONS] <REFERENCE>", params: []param{{name: "REFERENCE", required: true}}, opts: []opt{{long: "format", val: "FORMAT"}}},
	{path: "snapshot create", usage: "msb snapshot create [OPTIONS] --from <SANDBOX> <NAME>", params: []param{{name: "NAME", required: true}}, opts: []opt{
		{long: "from", val: "SANDBOX"}, labelOpt, {long: "force", short: 'f'}, qOpt,
	}},
	{path: "snapshot list", usage: "msb snapshot list [OPTIONS]", opts: []opt{{long: "format", val: "FORMAT"}, qOpt}},
	{path: "snapshot inspect", usage: "msb snapshot inspect [OPTIONS] <SNAPSHOT>", params: []param{{name: "SNAPSHOT", required: true}}},
	{path: "snapshot remove", usage: "msb snapshot remove [OPTIONS] <SNAPSHOTS>...", params: []param{{name: "SNAPSHOTS", required: true, multi: true}}, opts: []opt{
		{long: "force", short: 'f'}, qOpt,
	}},
	{path: "doctor", usage: "msb doctor [OPTIONS]", opts: []opt{{long: "fix"}, {long: "yes", short: 'y'}}},
}

// aliases maps visible aliases to canonical subcommand words.
var aliases = map[string]string{"cp": "copy", "rm": "remove", "ls": "list", "mod": "modify"}

const topUsage = "msb [OPTIONS] <COMMAND>"

// resolveCommand finds the subcommand spec for args and returns the
// remaining arguments. Its key names the subcommand in faults and logs
// ("exec", "volume-remove").
func resolveCommand(args []string) (*spec, []string, error) {
	if len(args) == 0 {
		return nil, nil, &exitError{code: 2, msg: "error: 'msb' requires a subcommand but one was not provided\n" + usageTail(topUsage)}
	}
	word := args[0]
	if word == "--version" || word == "-V" {
		return nil, nil, &exitError{code: 0, out: "msb " + version() + "\n"}
	}
	if a, ok := aliases[word]; ok {
		word = a
	}
	rest := args[1:]
	if word == "volume" || word == "image" || word == "snapshot" {
		group := word
		if len(rest) == 0 {
			return nil, nil, &exitError{code: 2, msg: "error: 'msb " + group + "' requires a subcommand but one was not provided\n" + usageTail("msb "+group+" <COMMAND>")}
		}
		sub := rest[0]
		if a, ok := aliases[sub]; ok {
			sub = a
		}
		word = group + " " + sub
		rest = rest[1:]
		if !knownCommand(word) {
			return nil, nil, &exitError{code: 2, msg: fmt.Sprintf("error: unrecognized subcommand '%s'\n%s", args[1], usageTail("msb "+group+" <COMMAND>"))}
		}
	}
	for _, s := range specs {
		if s.path == word {
			return s, rest, nil
		}
	}
	return nil, nil, &exitError{code: 2, msg: fmt.Sprintf("error: unrecognized subcommand '%s'\n%s", args[0], usageTail(topUsage))}
}

func knownCommand(path string) bool {
	for _, s := range specs {
		if s.path == path {
			return true
		}
	}
	return false
}

func (s *spec) key() string { return strings.ReplaceAll(s.path, " ", "-") }
