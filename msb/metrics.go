package msb

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Metrics is `msb metrics NAME --format json`: one sample of a sandbox's
// use, as msb's metrics registry last recorded it. Counters are totals
// since the sandbox's current run started.
type Metrics struct {
	Name      string
	State     string // "running", "stalled" (no recent sample) or "exited"
	CPUs      int    // 0 when msb could not resolve the sandbox's config
	Timestamp time.Time

	CPUPercent       float64 // of one vCPU: 200 is two busy vCPUs
	MemoryBytes      int64
	MemoryLimitBytes int64
	DiskReadBytes    int64
	DiskWriteBytes   int64
	NetRxBytes       int64
	NetTxBytes       int64
	// UpperUsedBytes and UpperFreeBytes are the root disk's writable layer;
	// 0 when msb does not report them.
	UpperUsedBytes int64
	UpperFreeBytes int64
	Uptime         time.Duration
}

// MetricsArgs returns `metrics NAME --format json`.
func MetricsArgs(name string) ([]string, error) {
	if err := ValidateName("name", name); err != nil {
		return nil, err
	}
	return []string{"metrics", name, "--format", "json"}, nil
}

// Metrics runs `msb metrics NAME --format json` and parses it. A sandbox
// msb recorded no metrics for (stopped since before its last boot, or never
// booted) fails with ErrNoMetrics.
func (c *Client) Metrics(ctx context.Context, name string) (*Metrics, error) {
	args, err := MetricsArgs(name)
	res, err := c.run(ctx, args, err)
	if err != nil {
		return nil, err
	}
	m, err := ParseMetrics(res.Stdout)
	if err == nil && m.Name != name {
		return nil, fmt.Errorf("%w: msb metrics %s described sandbox %q", ErrMalformedOutput, name, m.Name)
	}
	return m, err
}

// metricStates are the states msb 0.6.18 reports.
var metricStates = []string{"running", "stalled", "exited"}

// ParseMetrics parses one `msb metrics NAME --format json` object. It is
// strict about what the project reads: name, state, timestamp and every
// counter must be present with the right type (integers non-negative,
// floats finite and non-negative); cpus may be null; the upper_* fields may
// be absent. Unknown fields are ignored, so a newer msb that adds some
// still parses.
func ParseMetrics(data []byte) (*Metrics, error) {
	const what = "metrics"
	o, err := decodeObject(what, -1, "", bytes.TrimSpace(data))
	if err != nil {
		return nil, err
	}
	m := &Metrics{}
	if m.Name, err = o.str("name", true); err != nil {
		return nil, err
	}
	if m.State, err = o.str("state", true); err != nil {
		return nil, err
	}
	if !slices.Contains(metricStates, m.State) {
		return nil, o.fail("state", "is "+quoteBounded(m.State, 32)+", not one of running, stalled, exited")
	}
	if m.Timestamp, err = o.time("timestamp"); err != nil {
		return nil, err
	}
	cpus, err := o.count("cpus", math.MaxUint32)
	if err != nil {
		return nil, err
	}
	m.CPUs = int(cpus)
	for _, f := range []struct {
		key string
		dst *int64
	}{
		{"memory_bytes", &m.MemoryBytes}, {"memory_limit_bytes", &m.MemoryLimitBytes},
		{"disk_read_bytes", &m.DiskReadBytes}, {"disk_write_bytes", &m.DiskWriteBytes},
		{"net_rx_bytes", &m.NetRxBytes}, {"net_tx_bytes", &m.NetTxBytes},
	} {
		if _, ok := o.raw(f.key); !ok {
			return nil, o.fail(f.key, "is missing")
		}
		if *f.dst, err = o.count(f.key, math.MaxInt64); err != nil {
			return nil, err
		}
	}
	if m.UpperUsedBytes, err = o.count("upper_used_bytes", math.MaxInt64); err != nil {
		return nil, err
	}
	if m.UpperFreeBytes, err = o.count("upper_free_bytes", math.MaxInt64); err != nil {
		return nil, err
	}
	if m.CPUPercent, err = o.real("cpu_percent", math.MaxFloat64); err != nil {
		return nil, err
	}
	// An uptime beyond ~292 years does not fit a Duration.
	uptime, err := o.real("uptime_secs", float64(math.MaxInt64/int64(time.Second)))
	if err != nil {
		return nil, err
	}
	m.Uptime = time.Duration(uptime * float64(time.Second))
	return m, nil
}

// real reads a required finite number in 0..limit.
func (o obj) real(key string, limit float64) (float64, error) {
	r, ok := o.raw(key)
	if !ok {
		return 0, o.fail(key, "is missing")
	}
	var f float64
	if err := json.Unmarshal(r, &f); err != nil {
		return 0, o.fail(key, "is not a number")
	}
	if f < 0 || f > limit {
		return 0, o.fail(key, fmt.Sprintf("is %g, outside 0..%g", f, limit))
	}
	return f, nil
}
