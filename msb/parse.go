package msb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
)

// legacyTimeLayout is the local-time form msb used for created_at before
// it switched to RFC 3339.
const legacyTimeLayout = "2006-01-02 15:04:05"

// ParseTime parses an msb timestamp: RFC 3339 with any offset and optional
// fraction, or the legacy "YYYY-MM-DD HH:MM:SS", which is local time.
func ParseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(legacyTimeLayout, s, time.Local); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%w: time %s is neither RFC 3339 nor YYYY-MM-DD HH:MM:SS", ErrMalformedOutput, quoteBounded(s, 64))
}

// ParseList parses `msb list --format json`. Empty output, null and [] give
// an empty slice. Every entry needs a name, a status and a created_at;
// unknown fields are ignored.
//
// A listed name is any non-empty string: msb lists what it accepted, which
// is more than ValidateName allows (0.6.18 takes volume names of up to 250
// bytes), and one resource that is not ours must not make a whole listing
// unreadable. A name is validated when it is acted on (every argv builder
// does).
func ParseList(data []byte) ([]Sandbox, error) {
	const what = "list"
	entries, err := decodeArray(what, data)
	if err != nil {
		return nil, err
	}
	out := make([]Sandbox, 0, len(entries))
	for i, raw := range entries {
		o, err := decodeObject(what, i, "", raw)
		if err != nil {
			return nil, err
		}
		var s Sandbox
		if s.Name, err = o.str("name", true); err != nil {
			return nil, err
		}
		if s.Status, err = o.str("status", true); err != nil {
			return nil, err
		}
		if s.Image, err = o.str("image", false); err != nil {
			return nil, err
		}
		if s.CreatedAt, err = o.time("created_at"); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// ParseVolumeList parses `msb volume list --format json`. Empty output,
// null and [] give an empty slice. Every entry needs a name (any non-empty
// string, as in ParseList) and a created_at; unknown fields are ignored.
func ParseVolumeList(data []byte) ([]Volume, error) {
	const what = "volume list"
	entries, err := decodeArray(what, data)
	if err != nil {
		return nil, err
	}
	out := make([]Volume, 0, len(entries))
	for i, raw := range entries {
		o, err := decodeObject(what, i, "", raw)
		if err != nil {
			return nil, err
		}
		var v Volume
		if v.Name, err = o.str("name", true); err != nil {
			return nil, err
		}
		if v.Kind, err = o.str("kind", false); err != nil {
			return nil, err
		}
		if v.UsedBytes, err = o.count("used_bytes", math.MaxInt64); err != nil {
			return nil, err
		}
		if v.CreatedAt, err = o.time("created_at"); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// ParseInspect parses `msb inspect NAME --format json`. name and created_at
// are required. The network counts as enabled unless config.network.enabled
// says false or its policy denies all egress (msb 0.6.18 shows --no-net as
// enabled with policy.default_egress "deny" and no rules): msb enables it by
// default, and absence must not read as isolation. Labels is never nil.
func ParseInspect(data []byte) (*SandboxInfo, error) {
	const what = "inspect"
	o, err := decodeObject(what, -1, "", bytes.TrimSpace(data))
	if err != nil {
		return nil, err
	}
	info := &SandboxInfo{Labels: map[string]string{}, Network: true}
	if info.Name, err = o.name("name", true); err != nil {
		return nil, err
	}
	if info.Status, err = o.str("status", false); err != nil {
		return nil, err
	}
	if info.CreatedAt, err = o.time("created_at"); err != nil {
		return nil, err
	}
	if _, ok := o.raw("updated_at"); ok {
		if info.UpdatedAt, err = o.time("updated_at"); err != nil {
			return nil, err
		}
	}
	cfg, ok, err := o.object("config")
	if err != nil || !ok {
		return info, err
	}
	if image, ok, err := cfg.object("image"); err != nil {
		return nil, err
	} else if ok {
		if oci, ok, err := image.object("Oci"); err != nil {
			return nil, err
		} else if ok {
			if info.Image, err = oci.str("reference", false); err != nil {
				return nil, err
			}
		}
	}
	if res, ok, err := cfg.object("resources"); err != nil {
		return nil, err
	} else if ok {
		cpus, err := res.count("cpus", math.MaxInt32)
		if err != nil {
			return nil, err
		}
		mem, err := res.count("memory_mib", math.MaxInt32)
		if err != nil {
			return nil, err
		}
		info.CPUs, info.MemoryMiB = int(cpus), int(mem)
	}
	if rt, ok, err := cfg.object("runtime"); err != nil {
		return nil, err
	} else if ok {
		if info.Workdir, err = rt.str("workdir", false); err != nil {
			return nil, err
		}
		if info.User, err = rt.str("user", false); err != nil {
			return nil, err
		}
	}
	if info.CopyFiles, err = parseCopyFiles(cfg); err != nil {
		return nil, err
	}
	if lc, ok, err := cfg.object("lifecycle"); err != nil {
		return nil, err
	} else if ok {
		secs, err := lc.count("idle_timeout_secs", math.MaxInt32)
		if err != nil {
			return nil, err
		}
		info.IdleTimeout = time.Duration(secs) * time.Second
	}
	if net, ok, err := cfg.object("network"); err != nil {
		return nil, err
	} else if ok {
		if info.Network, err = net.boolean("enabled", true); err != nil {
			return nil, err
		}
		if info.Network {
			if info.Network, err = egressAllowed(net); err != nil {
				return nil, err
			}
		}
		if info.Ports, err = parsePorts(net); err != nil {
			return nil, err
		}
	}
	if labels, ok, err := cfg.object("labels"); err != nil {
		return nil, err
	} else if ok {
		for k := range labels.m {
			if info.Labels[k], err = labels.str(k, true); err != nil {
				return nil, err
			}
		}
	}
	if info.Mounts, err = parseMounts(cfg); err != nil {
		return nil, err
	}
	return info, nil
}

// parseCopyFiles reads the destinations of config.patches' CopyFile
// entries; other kinds of patch are skipped.
func parseCopyFiles(cfg obj) ([]string, error) {
	raw, ok := cfg.raw("patches")
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var patches []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &patches); err != nil {
		return nil, cfg.fail("patches", "is not a list of objects")
	}
	var dsts []string
	for _, p := range patches {
		body, ok := p["CopyFile"]
		if !ok {
			continue
		}
		var f struct {
			Dst *string `json:"dst"`
		}
		if err := json.Unmarshal(body, &f); err != nil || f.Dst == nil {
			return nil, cfg.fail("patches", "has a CopyFile without a dst string")
		}
		dsts = append(dsts, *f.Dst)
	}
	return dsts, nil
}

// egressAllowed reads config.network.policy: the guest can reach out unless
// the default egress is "deny" and no rule makes an exception (an ingress
// rule, which admits forwarded ports only, makes none). A missing policy
// allows.
func egressAllowed(net obj) (bool, error) {
	policy, ok, err := net.object("policy")
	if err != nil || !ok {
		return true, err
	}
	egress, err := policy.str("default_egress", false)
	if err != nil || egress != "deny" {
		return true, err
	}
	raw, ok := policy.raw("rules")
	if !ok {
		return false, nil
	}
	var rules []json.RawMessage
	if err := json.Unmarshal(raw, &rules); err != nil {
		return false, policy.fail("rules", "is not an array")
	}
	for i, r := range rules {
		rule, err := decodeObject(policy.output, policy.index, fmt.Sprintf("%s[%d]", policy.join("rules"), i), r)
		if err != nil {
			return false, err
		}
		dir, err := rule.str("direction", false)
		if err != nil {
			return false, err
		}
		if dir != "ingress" {
			return true, nil
		}
	}
	return false, nil
}

// parsePorts reads config.network.ports, each
// {"host_bind", "host_port", "guest_port", "protocol"}.
func parsePorts(net obj) ([]PortForward, error) {
	raw, ok := net.raw("ports")
	if !ok {
		return nil, nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, net.fail("ports", "is not an array")
	}
	var ports []PortForward
	for i, e := range entries {
		p, err := decodeObject(net.output, net.index, fmt.Sprintf("%s[%d]", net.join("ports"), i), e)
		if err != nil {
			return nil, err
		}
		var f PortForward
		if f.Addr, err = p.str("host_bind", true); err != nil {
			return nil, err
		}
		host, err := p.count("host_port", 65535)
		if err != nil {
			return nil, err
		}
		guest, err := p.count("guest_port", 65535)
		if err != nil {
			return nil, err
		}
		f.Host, f.Guest = int(host), int(guest)
		if f.Protocol, err = p.str("protocol", false); err != nil {
			return nil, err
		}
		if _, err := f.spec(); err != nil {
			return nil, net.fail(fmt.Sprintf("ports[%d]", i), err.Error())
		}
		ports = append(ports, f)
	}
	return ports, nil
}

func parseMounts(cfg obj) ([]MountInfo, error) {
	raw, ok := cfg.raw("mounts")
	if !ok {
		return nil, nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, cfg.fail("mounts", "is not an array")
	}
	mounts := make([]MountInfo, 0, len(entries))
	for i, e := range entries {
		m, err := decodeObject(cfg.output, cfg.index, fmt.Sprintf("%s[%d]", cfg.join("mounts"), i), e)
		if err != nil {
			return nil, err
		}
		var mi MountInfo
		if mi.Type, err = m.str("type", true); err != nil {
			return nil, err
		}
		if mi.Guest, err = m.str("guest", false); err != nil {
			return nil, err
		}
		if mi.Guest != "" && !strings.HasPrefix(mi.Guest, "/") {
			return nil, m.fail("guest", "is not an absolute path")
		}
		if mi.Type == "Named" {
			if mi.Name, err = m.name("name", true); err != nil {
				return nil, err
			}
		}
		size, err := m.count("size_mib", math.MaxInt32)
		if err != nil {
			return nil, err
		}
		mi.SizeMiB = int(size)
		if opts, ok, err := m.object("options"); err != nil {
			return nil, err
		} else if ok {
			if mi.ReadOnly, err = opts.boolean("readonly", false); err != nil {
				return nil, err
			}
		}
		mounts = append(mounts, mi)
	}
	return mounts, nil
}

// decodeArray splits a JSON array into its raw entries.
func decodeArray(output string, data []byte) ([]json.RawMessage, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, nil
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, &ParseError{Output: output, Index: -1, Reason: "is not a JSON array: " + err.Error()}
	}
	return entries, nil
}

// obj is one decoded JSON object plus where it sits, so every error names
// the output, the entry index and the full field path.
type obj struct {
	output string
	index  int
	path   string
	m      map[string]json.RawMessage
}

func decodeObject(output string, index int, path string, raw json.RawMessage) (obj, error) {
	o := obj{output: output, index: index, path: path}
	if len(raw) == 0 || raw[0] != '{' {
		return o, &ParseError{Output: output, Index: index, Field: path, Reason: "is not a JSON object"}
	}
	if err := json.Unmarshal(raw, &o.m); err != nil {
		return o, &ParseError{Output: output, Index: index, Field: path, Reason: "is not a JSON object: " + err.Error()}
	}
	return o, nil
}

func (o obj) join(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

func (o obj) fail(key, reason string) error {
	return &ParseError{Output: o.output, Index: o.index, Field: o.join(key), Reason: reason}
}

// raw returns a field's JSON, treating null like absence.
func (o obj) raw(key string) (json.RawMessage, bool) {
	r, ok := o.m[key]
	if !ok || string(r) == "null" {
		return nil, false
	}
	return r, true
}

func (o obj) str(key string, required bool) (string, error) {
	r, ok := o.raw(key)
	if !ok {
		if required {
			return "", o.fail(key, "is missing")
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		return "", o.fail(key, "is not a string")
	}
	if required && s == "" {
		return "", o.fail(key, "is empty")
	}
	return s, nil
}

func (o obj) name(key string, required bool) (string, error) {
	s, err := o.str(key, required)
	if err != nil || s == "" {
		return s, err
	}
	if err := ValidateName(key, s); err != nil {
		return "", o.fail(key, err.(*ValidationError).Reason+": "+quoteBounded(s, 64))
	}
	return s, nil
}

func (o obj) time(key string) (time.Time, error) {
	s, err := o.str(key, true)
	if err != nil {
		return time.Time{}, err
	}
	t, err := ParseTime(s)
	if err != nil {
		return time.Time{}, o.fail(key, "is neither RFC 3339 nor YYYY-MM-DD HH:MM:SS: "+quoteBounded(s, 64))
	}
	return t, nil
}

// count reads a non-negative integer of at most limit; absent or null is 0.
func (o obj) count(key string, limit int64) (int64, error) {
	r, ok := o.raw(key)
	if !ok {
		return 0, nil
	}
	var n int64
	if err := json.Unmarshal(r, &n); err != nil {
		return 0, o.fail(key, "is not an integer")
	}
	if n < 0 || n > limit {
		return 0, o.fail(key, fmt.Sprintf("is %d, outside 0..%d", n, limit))
	}
	return n, nil
}

func (o obj) boolean(key string, def bool) (bool, error) {
	r, ok := o.raw(key)
	if !ok {
		return def, nil
	}
	var b bool
	if err := json.Unmarshal(r, &b); err != nil {
		return false, o.fail(key, "is not a boolean")
	}
	return b, nil
}

// object returns a nested object; ok is false when it is absent or null.
func (o obj) object(key string) (obj, bool, error) {
	r, ok := o.raw(key)
	if !ok {
		return obj{}, false, nil
	}
	sub, err := decodeObject(o.output, o.index, o.join(key), r)
	return sub, err == nil, err
}
