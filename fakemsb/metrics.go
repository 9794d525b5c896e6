//go:build linux

package main

// metricsDoc is msb 0.6.18's `metrics NAME --format json` object; serde
// prints its keys sorted.
type metricsDoc struct {
	CPUPercent              float64 `json:"cpu_percent"`
	CPUs                    int     `json:"cpus"`
	DiskReadBytes           int64   `json:"disk_read_bytes"`
	DiskWriteBytes          int64   `json:"disk_write_bytes"`
	MemoryAvailableBytes    int64   `json:"memory_available_bytes"`
	MemoryBytes             int64   `json:"memory_bytes"`
	MemoryHostResidentBytes int64   `json:"memory_host_resident_bytes"`
	MemoryLimitBytes        int64   `json:"memory_limit_bytes"`
	Name                    string  `json:"name"`
	NetRxBytes              int64   `json:"net_rx_bytes"`
	NetTxBytes              int64   `json:"net_tx_bytes"`
	State                   string  `json:"state"`
	Timestamp               string  `json:"timestamp"`
	UpperFreeBytes          int64   `json:"upper_free_bytes"`
	UpperHostAllocatedBytes int64   `json:"upper_host_allocated_bytes"`
	UpperUsedBytes          int64   `json:"upper_used_bytes"`
	UptimeSecs              float64 `json:"uptime_secs"`
	VCPUTimeNs              int64   `json:"vcpu_time_ns"`
}

// metrics answers `metrics NAME --format json`: a Running sandbox's
// sample (no guest use is measured: counters are zero, memory is all
// available) or msb's error for a Stopped one.
func (a *app) metrics(p *parsed) error {
	if err := p.oneOf("format", "json"); err != nil {
		return err
	}
	if !p.has("format") || p.arg("NAME") == "" {
		return failf("fakemsb: only `metrics NAME --format json` is modelled")
	}
	var sb *sandbox
	err := a.withState(func(st *state) error {
		var err error
		sb, err = st.get(p.arg("NAME"))
		return err
	})
	if err != nil {
		return err
	}
	if sb.Status != statusRunning {
		return failf("no metrics recorded for sandbox %q", sb.Name)
	}
	limit := int64(sb.MemoryMiB) << 20
	rootDisk := int64(sb.RootDiskMiB) << 20
	return a.printJSON(metricsDoc{
		CPUs: sb.CPUs, Name: sb.Name, State: "running", Timestamp: fmtTime(a.now),
		MemoryAvailableBytes: limit, MemoryLimitBytes: limit,
		UpperFreeBytes: rootDisk, UptimeSecs: max(a.now.Sub(sb.UpdatedAt).Seconds(), 0),
	})
}
