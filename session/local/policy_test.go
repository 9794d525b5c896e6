package local

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session"
)

func TestParseLimits(t *testing.T) {
	l, err := ParseLimits("wall-time=30s", "output=16M", "memory=64MiB", "processes=64", "cpu=0.5", "file-size=10k")
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{WallTime: 30 * time.Second, OutputBytes: 16 << 20, MemoryBytes: 64 << 20, Processes: 64,
		CPUQuota: 50 * time.Millisecond, CPUPeriod: 100 * time.Millisecond, FileSize: 10 << 10}
	if l != want {
		t.Fatalf("got %+v\nwant %+v", l, want)
	}
	back, err := ParseLimits(strings.Split(l.String(), ",")...)
	if err != nil || back != l {
		t.Fatalf("round trip of %q: %+v %v", l.String(), back, err)
	}
	for spec, want := range map[string]Limits{
		"cpu=2":            {CPUQuota: 200 * time.Millisecond, CPUPeriod: 100 * time.Millisecond},
		"cpu=0.25cpu":      {CPUQuota: 25 * time.Millisecond, CPUPeriod: 100 * time.Millisecond},
		"cpu=20ms/50ms":    {CPUQuota: 20 * time.Millisecond, CPUPeriod: 50 * time.Millisecond},
		"memory=1G":        {MemoryBytes: 1 << 30},
		"output=512":       {OutputBytes: 512},
		"output=512B":      {OutputBytes: 512},
		"file-size=2TiB":   {FileSize: 2 << 40},
		"wall-time=1500ms": {WallTime: 1500 * time.Millisecond},
	} {
		got, err := ParseLimits(spec)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v", spec, got, err)
		}
	}
}

func TestParseLimitsRefuses(t *testing.T) {
	for _, specs := range [][]string{
		{"memory"}, {"=1"}, {"memory="}, {"bogus=1"}, {"Memory=1M"},
		{"memory=0"}, {"memory=-1M"}, {"memory=1.5M"}, {"memory=64MB"}, {"memory=4M"},
		{"memory=99999999999T"}, {"processes=0"}, {"processes=ten"}, {"processes=-3"},
		{"wall-time=30"}, {"wall-time=0s"}, {"wall-time=-1s"},
		{"cpu=0"}, {"cpu=-1"}, {"cpu=NaN"}, {"cpu=abc"}, {"cpu=1ms/2s"}, {"cpu=500us/100ms"}, {"cpu=/"},
		{"file-size=0"}, {"output=1X"},
		{"memory=64M", "memory=32M"},
	} {
		_, err := ParseLimits(specs...)
		var pe *PolicyError
		if !errors.As(err, &pe) || !errors.Is(err, session.ErrInvalid) {
			t.Errorf("%q: want a *PolicyError, got %v", specs, err)
		}
	}
}

func TestLimitsIsAFlag(t *testing.T) {
	var l Limits
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(&l, "limit", "KEY=VALUE")
	if err := fs.Parse([]string{"--limit", "memory=64M", "--limit", "processes=8"}); err != nil {
		t.Fatal(err)
	}
	if l.MemoryBytes != 64<<20 || l.Processes != 8 {
		t.Fatalf("%+v", l)
	}
	if err := fs.Parse([]string{"--limit", "nope=1"}); err == nil {
		t.Fatal("unknown key accepted")
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, l := range []Limits{
		{MemoryBytes: -1}, {Processes: -1}, {WallTime: -time.Second}, {CPUPeriod: 100 * time.Millisecond},
		{CPUQuota: time.Microsecond}, {CPUQuota: time.Second, CPUPeriod: 2 * time.Second},
	} {
		if err := l.validate(); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("%+v: %v", l, err)
		}
	}
}

func TestParseModeAndNetwork(t *testing.T) {
	for _, s := range []string{"read-only", "workspace-write", "danger-full-access"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range []string{"deny", "unrestricted", "allowlist"} {
		if n, err := ParseNetwork(s); err != nil || string(n) != s {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range []string{"", "ReadOnly", "full", "write"} {
		if _, err := ParseMode(s); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("mode %q accepted", s)
		}
	}
	for _, s := range []string{"", "none", "allow"} {
		if _, err := ParseNetwork(s); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("network %q accepted", s)
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	cases := []struct {
		p    Policy
		want error
	}{
		{Policy{}, nil},
		{Policy{Mode: ModeDangerFullAccess}, session.ErrInvalid},
		{Policy{Mode: ModeDangerFullAccess, AllowDangerous: true}, nil},
		{Policy{Network: NetworkAllowlist}, session.ErrInvalid},
		{Policy{Network: NetworkAllowlist, Allow: []egress.Target{{Host: "example.com"}}}, nil},
		{Policy{Network: NetworkDeny, Allow: []egress.Target{{Host: "example.com"}}}, session.ErrInvalid},
		{Policy{Mode: ModeDangerFullAccess, AllowDangerous: true, Network: NetworkAllowlist, Allow: []egress.Target{{Host: "example.com"}}}, session.ErrInvalid},
		{Policy{Mode: "root"}, session.ErrInvalid},
	}
	for _, c := range cases {
		err := c.p.withDefaults().validate()
		if (c.want == nil) != (err == nil) || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c.p, err, c.want)
		}
	}
}

func TestCapabilitiesCheck(t *testing.T) {
	all := map[string]Control{}
	for _, k := range limitKeys {
		all[k] = full("x")
	}
	good := Capabilities{Backend: "bubblewrap", Filesystem: full("x"), Network: full("x"), Process: full("x"), Limits: all,
		Modes: allModes, NetworkModes: []Network{NetworkDeny, NetworkUnrestricted}}
	if err := good.check(Policy{}.withDefaults(), Limits{MemoryBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	noCPU := good
	noCPU.Limits = map[string]Control{LimitMemory: full("x"), LimitCPU: none("no cpu controller")}
	err := noCPU.check(Policy{}.withDefaults(), Limits{CPUQuota: time.Millisecond * 10})
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Control != "limit cpu" || ue.Reason != "no cpu controller" {
		t.Fatalf("cpu: %v", err)
	}
	noNet := good
	noNet.Network = none("shared")
	if err := noNet.check(Policy{}.withDefaults(), Limits{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("deny without network evidence: %v", err)
	}
	if err := noNet.check(Policy{Network: NetworkUnrestricted}.withDefaults(), Limits{}); err != nil {
		t.Fatalf("unrestricted needs no network evidence: %v", err)
	}
	denyOnly := good
	denyOnly.NetworkModes = []Network{NetworkDeny}
	if err := denyOnly.check(Policy{Network: NetworkUnrestricted}.withDefaults(), Limits{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unsupported network mode: %v", err)
	}
	writeOnly := good
	writeOnly.Modes = []Mode{ModeWorkspaceWrite}
	if err := writeOnly.check(Policy{Mode: ModeReadOnly}.withDefaults(), Limits{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unsupported mode: %v", err)
	}
	partialProc := good
	partialProc.Process = partial("group kill only")
	if err := partialProc.check(Policy{}.withDefaults(), Limits{WallTime: time.Second}); err != nil {
		t.Fatalf("default process requirement: %v", err)
	}
	if err := partialProc.check(Policy{Require: Requirements{Process: EvidenceFull}}.withDefaults(), Limits{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("raised process requirement: %v", err)
	}
	if err := (Capabilities{}).check(Policy{Mode: ModeDangerFullAccess, AllowDangerous: true}, Limits{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no backend: %v", err)
	}
}

func TestSessionNames(t *testing.T) {
	now := time.Unix(1700000000, 0)
	long := string(make([]byte, 500))
	for _, c := range [][3]string{
		{"", "ws", "sess"}, {"", "", ""}, {"My Prefix!", "Work/Space", "../../etc"}, {"-x", long, long}, {"", "ÄÖÜ", "日本"},
	} {
		n := sessionName(c[0], c[1], c[2], now)
		if msb.ValidateName("session name", n) != nil {
			t.Errorf("%q → invalid name %q", c, n)
		}
	}
	if a, b := sessionName("", "w", "s", now), sessionName("", "w", "s", now); a == b {
		t.Fatalf("names collide: %s", a)
	}
}

func TestJailPath(t *testing.T) {
	roots := []string{"/workspace", "/mnt/session/uploads", "/mnt/session/outputs"}
	ok := map[string][2]string{
		"/workspace":                  {"/workspace", "."},
		"/workspace/a/./b/":           {"/workspace", "a/b"},
		"/workspace/skills/x":         {"/workspace", "skills/x"},
		"/mnt/session/uploads/f":      {"/mnt/session/uploads", "f"},
		"//workspace//a":              {"/workspace", "a"},
		"/mnt/session/outputs/a/b.md": {"/mnt/session/outputs", "a/b.md"},
	}
	for p, want := range ok {
		root, rel, err := jailPath(p, roots...)
		if err != nil || root != want[0] || rel != want[1] {
			t.Errorf("%s: %s %s %v", p, root, rel, err)
		}
	}
	for _, p := range []string{"", "workspace", "/", "/etc/passwd", "/workspace/..", "/workspace/../workspace",
		"/workspace-escape", "/workspaces/x", "/mnt/session", "/mnt/session/uploadsx", "/workspace/a/../../etc"} {
		if _, _, err := jailPath(p, roots...); !errors.Is(err, ErrPathEscape) || !errors.Is(err, session.ErrInvalid) {
			t.Errorf("%q accepted: %v", p, err)
		}
	}
}

func TestScrubEnv(t *testing.T) {
	kept, dropped, err := scrubEnv(map[string]string{"GITHUB_TOKEN": "x", "aws_secret_access_key": "x", "API-KEY": "x",
		"OPENAI_API_KEY": "x", "Cookie_jar": "x", "HTTP_AUTHORIZATION": "x", "PGPASSWORD": "x", "MY_CREDENTIALS": "x",
		"EDITOR": "vi", "LANG": "C"})
	if err == nil {
		t.Fatal("invalid name API-KEY accepted")
	}
	kept, dropped, err = scrubEnv(map[string]string{"GITHUB_TOKEN": "x", "aws_secret_access_key": "x", "APIKEY": "x",
		"OPENAI_API_KEY": "x", "Cookie_jar": "x", "HTTP_AUTHORIZATION": "x", "PGPASSWORD": "x", "MY_CREDENTIALS": "x",
		"EDITOR": "vi", "LANG": "C"})
	if err != nil || len(kept) != 2 || kept["EDITOR"] != "vi" || len(dropped) != 8 {
		t.Fatalf("kept %v dropped %v err %v", kept, dropped, err)
	}
}
