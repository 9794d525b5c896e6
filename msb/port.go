package msb

import (
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPortAddr is where a forwarded port listens on the host when the
// caller names no address: loopback only, never every interface.
const DefaultPortAddr = "127.0.0.1"

// PortForward is one --port ADDR:HOST:GUEST[/udp]: msb listens on the
// host's ADDR:HOST and forwards each connection to the guest's GUEST.
type PortForward struct {
	Addr     string // host address to listen on; "" means DefaultPortAddr
	Host     int    // 1..65535
	Guest    int    // 1..65535
	Protocol string // "", "tcp" or "udp"; "" means tcp
}

// ParsePortForward reads [ADDR:]HOST:GUEST[/tcp|/udp], the grammar of
// msb's -p, with an IPv6 ADDR in brackets ("[::1]:8080:80"). An omitted
// ADDR is DefaultPortAddr, as msb does.
func ParsePortForward(spec string) (PortForward, error) {
	body, proto := spec, ""
	if i := strings.LastIndexByte(spec, '/'); i >= 0 {
		body, proto = spec[:i], spec[i+1:]
		if proto != "tcp" && proto != "udp" {
			return PortForward{}, invalid("port", spec, "protocol must be /tcp or /udp")
		}
	}
	var addr string
	if inner, ok := strings.CutPrefix(body, "["); ok {
		a, rest, ok := strings.Cut(inner, "]:")
		if !ok {
			return PortForward{}, invalid("port", spec, "an IPv6 address must be written [ADDR]:HOST:GUEST")
		}
		addr, body = a, rest
	} else if strings.Count(body, ":") == 2 {
		addr, body, _ = strings.Cut(body, ":")
	}
	hostText, guestText, ok := strings.Cut(body, ":")
	if !ok || strings.Contains(guestText, ":") {
		return PortForward{}, invalid("port", spec, "must be [ADDR:]HOST:GUEST[/udp] (IPv6 ADDR in brackets)")
	}
	host, err1 := strconv.Atoi(hostText)
	guest, err2 := strconv.Atoi(guestText)
	if err1 != nil || err2 != nil || !allDigits(hostText) || !allDigits(guestText) {
		return PortForward{}, invalid("port", spec, "HOST and GUEST must be port numbers")
	}
	f := PortForward{Addr: addr, Host: host, Guest: guest, Protocol: proto}
	if _, err := f.spec(); err != nil {
		return PortForward{}, err
	}
	return f, nil
}

// String renders f as ParsePortForward reads it, with the address made
// explicit.
func (f PortForward) String() string {
	s, err := f.spec()
	if err != nil {
		return "invalid port forward"
	}
	return s
}

// address returns the listening address, DefaultPortAddr when unset.
func (f PortForward) address() (netip.Addr, error) {
	text := f.Addr
	if text == "" {
		text = DefaultPortAddr
	}
	a, err := netip.ParseAddr(text)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, invalid("port address", f.Addr, "must be an IPv4 or IPv6 address without a zone")
	}
	return a.Unmap(), nil
}

// spec validates f and renders ADDR:HOST:GUEST[/udp], the address always
// explicit so that msb's default can never widen it.
func (f PortForward) spec() (string, error) {
	a, err := f.address()
	if err != nil {
		return "", err
	}
	for _, p := range []struct {
		field string
		n     int
	}{{"host port", f.Host}, {"guest port", f.Guest}} {
		if p.n < 1 || p.n > 65535 {
			return "", invalid(p.field, strconv.Itoa(p.n), "must be between 1 and 65535")
		}
	}
	if err := checkEnum("port protocol", f.Protocol, "", "tcp", "udp"); err != nil {
		return "", err
	}
	host := a.String()
	if a.Is6() {
		host = "[" + host + "]"
	}
	s := host + ":" + strconv.Itoa(f.Host) + ":" + strconv.Itoa(f.Guest)
	if f.Protocol == "udp" {
		s += "/udp"
	}
	return s, nil
}

// checkPortForwards validates each forward and refuses two that would
// listen on the same host port and protocol: the same address, or one of
// them every address.
func checkPortForwards(fs []PortForward) ([]string, error) {
	specs := make([]string, 0, len(fs))
	for i, f := range fs {
		spec, err := f.spec()
		if err != nil {
			return nil, err
		}
		a, _ := f.address()
		for _, g := range fs[:i] {
			b, _ := g.address()
			if g.Host == f.Host && g.udp() == f.udp() && (a == b || a.IsUnspecified() || b.IsUnspecified()) {
				return nil, invalid("port", spec, "host port "+strconv.Itoa(f.Host)+" is forwarded twice ("+g.String()+")")
			}
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

func (f PortForward) udp() bool { return f.Protocol == "udp" }
