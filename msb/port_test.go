package msb

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParsePortForward(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want PortForward
		argv string // what create passes to msb
	}{
		{"8080:80", PortForward{Host: 8080, Guest: 80}, "127.0.0.1:8080:80"},
		{"0.0.0.0:8080:80", PortForward{Addr: "0.0.0.0", Host: 8080, Guest: 80}, "0.0.0.0:8080:80"},
		{"127.0.0.2:1:65535/udp", PortForward{Addr: "127.0.0.2", Host: 1, Guest: 65535, Protocol: "udp"}, "127.0.0.2:1:65535/udp"},
		{"8080:80/tcp", PortForward{Host: 8080, Guest: 80, Protocol: "tcp"}, "127.0.0.1:8080:80"},
		{"[::1]:8080:80", PortForward{Addr: "::1", Host: 8080, Guest: 80}, "[::1]:8080:80"},
	} {
		got, err := ParsePortForward(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParsePortForward(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		if s := got.String(); s != tt.argv {
			t.Errorf("%q renders as %q, want %q", tt.in, s, tt.argv)
		}
	}
	for _, tt := range []struct{ in, why string }{
		{"8080", "[ADDR:]HOST:GUEST"},
		{"0:80", "host port"},
		{"8080:0", "guest port"},
		{"70000:80", "host port"},
		{"8080:80:90", "port address"},
		{"localhost:8080:80", "port address"},
		{"::1:8080:80", "[ADDR:]HOST:GUEST"},
		{"[::1:8080:80", "IPv6"},
		{"[fe80::1%eth0]:8080:80", "zone"},
		{"8080:80/UDP", "/tcp or /udp"},
		{"8080:80/sctp", "/tcp or /udp"},
		{" 8080:80", "port numbers"},
		{"+8080:80", "port numbers"},
		{"", "[ADDR:]HOST:GUEST"},
	} {
		_, err := ParsePortForward(tt.in)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("ParsePortForward(%q) = %v, want an ErrInvalid naming %q", tt.in, err, tt.why)
		}
	}
}

func TestCreatePorts(t *testing.T) {
	args, err := CreateOptions{Image: "alpine", Name: "box1", Ports: []PortForward{
		{Host: 8080, Guest: 80}, {Host: 8080, Guest: 80, Protocol: "udp"}, {Addr: "::1", Host: 8080, Guest: 81},
	}}.Args()
	want := strings.Fields("create alpine --name box1 --port 127.0.0.1:8080:80 --port 127.0.0.1:8080:80/udp --port [::1]:8080:81")
	if err != nil || !slices.Equal(args, want) {
		t.Errorf("Args = %q, %v; want %q", args, err, want)
	}
	for _, tt := range []struct {
		ports []PortForward
		why   string
	}{
		{[]PortForward{{Host: 8080, Guest: 80}, {Host: 8080, Guest: 81}}, "host port 8080 is forwarded twice"},
		{[]PortForward{{Addr: "127.0.0.1", Host: 8080, Guest: 80}, {Host: 8080, Guest: 81}}, "forwarded twice"},
		{[]PortForward{{Addr: "0.0.0.0", Host: 8080, Guest: 80}, {Host: 8080, Guest: 81}}, "forwarded twice"},
		{[]PortForward{{Host: 0, Guest: 80}}, `host port "0"`},
		{[]PortForward{{Host: 80, Guest: 65536}}, `guest port "65536"`},
		{[]PortForward{{Addr: "example.com", Host: 80, Guest: 80}}, "port address"},
		{[]PortForward{{Host: 80, Guest: 80, Protocol: "sctp"}}, "port protocol"},
	} {
		_, err := CreateOptions{Image: "alpine", Name: "box1", Ports: tt.ports}.Args()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("ports %+v: %v, want an ErrInvalid naming %q", tt.ports, err, tt.why)
		}
	}
}

func TestIngressRuleToken(t *testing.T) {
	args, err := CreateOptions{Image: "alpine", Name: "box1", NoNet: true, NetRules: []NetRule{
		{Action: "allow", Direction: "ingress", Target: "any", Protocol: "tcp", Ports: "80"},
	}}.Args()
	want := strings.Fields("create alpine --name box1 --no-net --net-rule allow:ingress@any:tcp:80")
	if err != nil || !slices.Equal(args, want) {
		t.Errorf("Args = %q, %v; want %q", args, err, want)
	}
	_, err = CreateOptions{Image: "alpine", Name: "box1", NetRules: []NetRule{{Action: "allow", Direction: "inward", Target: "any"}}}.Args()
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "net rule direction") {
		t.Errorf("bad direction: %v", err)
	}
}

func TestModifyArgs(t *testing.T) {
	for _, tt := range []struct {
		o    ModifyOptions
		want string
	}{
		{ModifyOptions{Name: "box1", CPUs: 2}, "modify box1 --cpus 2"},
		{ModifyOptions{Name: "box1", Memory: "1G", NextStart: true}, "modify box1 --memory 1G --next-start"},
		{ModifyOptions{Name: "box1", CPUs: 255, Memory: "512M", Restart: true}, "modify box1 --cpus 255 --memory 512M --restart"},
	} {
		got, err := tt.o.Args()
		if err != nil || !slices.Equal(got, strings.Fields(tt.want)) {
			t.Errorf("%+v.Args() = %q, %v; want %q", tt.o, got, err, tt.want)
		}
	}
	for _, tt := range []struct {
		o   ModifyOptions
		why string
	}{
		{ModifyOptions{Name: "box1"}, "needs cpus or memory"},
		{ModifyOptions{Name: "box1", CPUs: 256}, `cpus "256"`},
		{ModifyOptions{Name: "box1", CPUs: -1}, `cpus "-1"`},
		{ModifyOptions{Name: "box1", Memory: "1Gi"}, "memory"},
		{ModifyOptions{Name: "box1", CPUs: 2, NextStart: true, Restart: true}, "exclude each other"},
		{ModifyOptions{Name: "bad name", CPUs: 2}, "name"},
	} {
		if _, err := tt.o.Args(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("%+v.Args() = %v, want an ErrInvalid naming %q", tt.o, err, tt.why)
		}
	}
}

func TestParseInspectPortsAndUpdatedAt(t *testing.T) {
	const doc = `{"name":"b","created_at":"2026-08-22T14:49:44Z","updated_at":"2026-08-22T15:00:00.5+00:00","config":{"network":{
		"enabled":true,
		"policy":{"default_egress":"deny","default_ingress":"deny","rules":[{"action":"allow","direction":"ingress","destination":"any","ports":[{"start":80,"end":80}],"protocols":["tcp"]}]},
		"ports":[{"guest_port":80,"host_bind":"127.0.0.1","host_port":18080,"protocol":"tcp"},{"guest_port":81,"host_bind":"::1","host_port":18081,"protocol":"udp"}]}}}`
	info, err := ParseInspect([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 8, 22, 15, 0, 0, 5e8, time.UTC); !info.UpdatedAt.Equal(want) {
		t.Errorf("UpdatedAt = %v, want %v", info.UpdatedAt, want)
	}
	if info.Network {
		t.Error("an ingress rule alone counted as network access out of the guest")
	}
	want := []PortForward{{Addr: "127.0.0.1", Host: 18080, Guest: 80, Protocol: "tcp"}, {Addr: "::1", Host: 18081, Guest: 81, Protocol: "udp"}}
	if !slices.Equal(info.Ports, want) {
		t.Errorf("Ports = %+v, want %+v", info.Ports, want)
	}
	egress := strings.Replace(doc, `"direction":"ingress"`, `"direction":"egress"`, 1)
	if info, err := ParseInspect([]byte(egress)); err != nil || !info.Network {
		t.Errorf("an egress allow rule: Network = %v, %v; want true", info != nil && info.Network, err)
	}
	bad := strings.Replace(doc, `"host_port":18080`, `"host_port":0`, 1)
	if _, err := ParseInspect([]byte(bad)); !errors.Is(err, ErrMalformedOutput) || !strings.Contains(err.Error(), "ports[0]") {
		t.Errorf("host port 0: %v, want a ParseError naming ports[0]", err)
	}
}

func TestClassifyRestartRequired(t *testing.T) {
	stderr := "error: cannot modify \"box1\" without a restart\n  → cpus requires restart: 1 -> 2\n  → no changes were applied\n"
	msg, kind := classify([]string{"modify", "box1", "--cpus", "2"}, 1, []byte(stderr))
	if kind != ErrRestartRequired || !strings.Contains(msg, "cpus requires restart: 1 -> 2") {
		t.Errorf("classify = %q, %v", msg, kind)
	}
	if _, kind := classify([]string{"modify", "box2", "--cpus", "2"}, 1, []byte(stderr)); kind != nil {
		t.Errorf("another sandbox's refusal classified as %v", kind)
	}
}
