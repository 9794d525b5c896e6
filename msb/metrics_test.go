package msb

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// metricsSample is msb 0.6.18's `metrics NAME --format json` for a running
// sandbox (keys as crates/cli/lib/commands/metrics.rs writes them).
const metricsSample = `{
  "cpu_percent": 12.5,
  "cpus": 2,
  "disk_read_bytes": 4096,
  "disk_write_bytes": 8192,
  "memory_available_bytes": 900000000,
  "memory_bytes": 123456789,
  "memory_host_resident_bytes": 200000000,
  "memory_limit_bytes": 1073741824,
  "name": "box1",
  "net_rx_bytes": 10,
  "net_tx_bytes": 20,
  "state": "running",
  "timestamp": "2026-11-30T15:53:02.561635358+00:00",
  "upper_free_bytes": 1000,
  "upper_host_allocated_bytes": 3000,
  "upper_used_bytes": 2000,
  "uptime_secs": 61.5,
  "vcpu_time_ns": 7000000
}`

func TestMetricsArgs(t *testing.T) {
	args, err := MetricsArgs("box1")
	if err != nil || !slices.Equal(args, []string{"metrics", "box1", "--format", "json"}) {
		t.Errorf("MetricsArgs = %q, %v", args, err)
	}
	for _, bad := range []string{"", "-w", "a b", "x/y"} {
		if _, err := MetricsArgs(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("MetricsArgs(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics([]byte(metricsSample))
	if err != nil {
		t.Fatal(err)
	}
	want := Metrics{
		Name: "box1", State: "running", CPUs: 2,
		Timestamp:  time.Date(2026, 11, 30, 15, 53, 2, 561635358, time.UTC),
		CPUPercent: 12.5, MemoryBytes: 123456789, MemoryLimitBytes: 1 << 30,
		DiskReadBytes: 4096, DiskWriteBytes: 8192, NetRxBytes: 10, NetTxBytes: 20,
		UpperUsedBytes: 2000, UpperFreeBytes: 1000, Uptime: 61500 * time.Millisecond,
	}
	if !m.Timestamp.Equal(want.Timestamp) {
		t.Errorf("Timestamp = %v, want %v", m.Timestamp, want.Timestamp)
	}
	m.Timestamp = want.Timestamp
	if *m != want {
		t.Errorf("ParseMetrics =\n%+v, want\n%+v", *m, want)
	}
	// cpus is null when msb cannot resolve the config; upper_* may be absent.
	lean := strings.NewReplacer(`"cpus": 2`, `"cpus": null`, `"upper_used_bytes": 2000,`, ``, `"upper_free_bytes": 1000,`, ``).Replace(metricsSample)
	if m, err := ParseMetrics([]byte(lean)); err != nil || m.CPUs != 0 || m.UpperUsedBytes != 0 {
		t.Errorf("lean sample: %+v, %v", m, err)
	}
}

func TestParseMetricsRefusesMalformed(t *testing.T) {
	for _, tt := range []struct{ name, old, new, field string }{
		{"not an object", metricsSample, `[]`, ""},
		{"trailing data", `"vcpu_time_ns": 7000000
}`, `"vcpu_time_ns": 7000000
} {}`, ""},
		{"missing name", `"name": "box1",`, ``, "name"},
		{"unknown state", `"state": "running"`, `"state": "Running"`, "state"},
		{"missing counter", `"memory_bytes": 123456789,`, ``, "memory_bytes"},
		{"null counter", `"net_rx_bytes": 10`, `"net_rx_bytes": null`, "net_rx_bytes"},
		{"negative counter", `"disk_read_bytes": 4096`, `"disk_read_bytes": -1`, "disk_read_bytes"},
		{"fractional counter", `"net_tx_bytes": 20`, `"net_tx_bytes": 2.5`, "net_tx_bytes"},
		{"counter as text", `"memory_limit_bytes": 1073741824`, `"memory_limit_bytes": "1G"`, "memory_limit_bytes"},
		{"negative cpu", `"cpu_percent": 12.5`, `"cpu_percent": -0.5`, "cpu_percent"},
		{"missing uptime", `"uptime_secs": 61.5,`, ``, "uptime_secs"},
		{"uptime overflow", `"uptime_secs": 61.5`, `"uptime_secs": 1e300`, "uptime_secs"},
		{"bad time", `"timestamp": "2026-11-30T15:53:02.561635358+00:00"`, `"timestamp": "yesterday"`, "timestamp"},
		{"cpus too big", `"cpus": 2`, `"cpus": 1e20`, "cpus"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := strings.Replace(metricsSample, tt.old, tt.new, 1)
			if data == metricsSample {
				t.Fatal("the replacement changed nothing")
			}
			_, err := ParseMetrics([]byte(data))
			var pe *ParseError
			if !errors.As(err, &pe) || !errors.Is(err, ErrMalformedOutput) || pe.Field != tt.field {
				t.Errorf("ParseMetrics = %v, want a ParseError on field %q", err, tt.field)
			}
		})
	}
}

func TestClientMetrics(t *testing.T) {
	ctx := context.Background()
	r := &recorder{stdout: metricsSample}
	m, err := NewClient(r).Metrics(ctx, "box1")
	if err != nil || m.Name != "box1" {
		t.Fatalf("Metrics = %+v, %v", m, err)
	}
	if !slices.Equal(r.calls[0].Args, []string{"metrics", "box1", "--format", "json"}) {
		t.Errorf("argv = %q", r.calls[0].Args)
	}
	if _, err := NewClient(&recorder{stdout: metricsSample}).Metrics(ctx, "other"); !errors.Is(err, ErrMalformedOutput) {
		t.Errorf("metrics of another sandbox: %v, want ErrMalformedOutput", err)
	}
}
