package omasandbox

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/oma-sandbox/oma-sandbox/guestagent/bundle"
	"github.com/oma-sandbox/oma-sandbox/session/local"
)

// Check is one fact Doctor reports about a backend.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, fail (the backend is unusable), or warn (some options are)
	Detail string `json:"detail"`
}

func okCheck(name, detail string) Check   { return Check{name, "ok", detail} }
func failCheck(name, detail string) Check { return Check{name, "fail", detail} }
func warnCheck(name, detail string) Check { return Check{name, "warn", detail} }

// usable reports whether no check failed.
func usable(checks []Check) bool {
	for _, ch := range checks {
		if ch.Status == "fail" {
			return false
		}
	}
	return true
}

// BackendReport is Doctor's verdict on one backend.
type BackendReport struct {
	Name   string  `json:"name"`
	Usable bool    `json:"usable"`
	Checks []Check `json:"checks"`
}

// Report is what Doctor found: each backend's checks, and the backend
// Backend "auto" picks ("" when none is usable).
type Report struct {
	Auto     string          `json:"auto"`
	Backends []BackendReport `json:"backends"`
}

// DoctorOptions tune Doctor and the probe behind Backend "auto".
type DoctorOptions struct {
	// Msb is the msb binary; "" means $OMA_MSB, else msb on PATH.
	Msb string
	// Image is the msb session image to look for; "" means the default
	// image, which must be in msb's cache (a named one may be pulled).
	Image  string
	Logger *slog.Logger
}

func (o DoctorOptions) msbBinary() string {
	switch {
	case o.Msb != "":
		return o.Msb
	case os.Getenv("OMA_MSB") != "":
		return os.Getenv("OMA_MSB")
	}
	return "msb"
}

func (o DoctorOptions) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

// Doctor reports which backends are usable on this host and, for each check
// that fails, why. msb needs its binary, msb's own "msb doctor" to pass (the
// CPU's virtualization, /dev/kvm, libkrunfw) and the session image in its
// cache; its version is reported against the tested range. The local backend
// needs bubblewrap that really isolates (proven by running a sandbox),
// ripgrep for the grep tool, and cgroups for the memory, processes and cpu
// limits (a warning only: just those limits are refused without them).
func Doctor(ctx context.Context, o DoctorOptions) Report {
	msbR := BackendReport{Name: BackendMsb, Checks: msbChecks(ctx, o)}
	msbR.Usable = usable(msbR.Checks)
	localR := BackendReport{Name: BackendLocal, Checks: append(localChecks(local.Probe(ctx)),
		localAgentCheck(runtime.GOOS, runtime.GOARCH, os.Geteuid() == 0, bundle.Binary))}
	localR.Usable = usable(localR.Checks)
	rep := Report{Backends: []BackendReport{msbR, localR}}
	switch {
	case msbR.Usable:
		rep.Auto = BackendMsb
	case localR.Usable:
		rep.Auto = BackendLocal
	}
	return rep
}

// localChecks turns the local probe's evidence into checks. Filesystem,
// network and process isolation must be proven for the default policy;
// cgroups only matter for the limits that need them.
func localChecks(caps local.Capabilities) []Check {
	var out []Check
	if caps.Backend == "" {
		out = append(out, failCheck("bubblewrap", "no working sandbox: "+caps.Filesystem.Detail))
	} else {
		out = append(out, okCheck("bubblewrap", caps.Platform+", "+caps.Backend))
	}
	for _, ctl := range []struct {
		name string
		c    local.Control
	}{{"filesystem", caps.Filesystem}, {"network", caps.Network}, {"process", caps.Process}} {
		if ctl.c.Evidence == local.EvidenceFull {
			out = append(out, okCheck(ctl.name, ctl.c.Detail))
		} else {
			out = append(out, failCheck(ctl.name, fmt.Sprintf("%s evidence: %s", ctl.c.Evidence, ctl.c.Detail)))
		}
	}
	if p, err := exec.LookPath("rg"); err != nil {
		out = append(out, failCheck("ripgrep", "rg not found; the grep tool needs it (Debian: apt-get install ripgrep)"))
	} else {
		out = append(out, okCheck("ripgrep", p))
	}
	var have, missing []string
	for _, k := range []string{local.LimitMemory, local.LimitProcesses, local.LimitCPU} {
		if caps.Limits[k].Evidence == local.EvidenceFull {
			have = append(have, k)
		} else {
			missing = append(missing, k+" ("+caps.Limits[k].Detail+")")
		}
	}
	if len(missing) == 0 {
		out = append(out, okCheck("cgroups", "enforced: "+strings.Join(have, ", ")))
	} else {
		out = append(out, warnCheck("cgroups", "--limit refused for: "+strings.Join(missing, "; ")))
	}
	return out
}
