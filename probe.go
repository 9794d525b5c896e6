package omasandbox

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/oma-sandbox/oma-sandbox/guestagent/bundle"
	"github.com/oma-sandbox/oma-sandbox/guestagent/selfagent"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/session/microvm"
)

// The msb versions oma-sandbox is tested with: its msb contract was written
// from the 0.6.x sources and targets 0.6.7 on; the pinned 0.6.18 binary
// (scripts/deps.sh) is what the contract tests run before any VM boot.
const (
	oldestTestedMsb = "0.6.7"
	newestTestedMsb = "0.6.18"
)

// probeTimeout bounds each msb invocation of the probe.
const probeTimeout = 15 * time.Second

// msbChecks are the msb backend's prerequisites: the binary, its version,
// msb's own `doctor` verdict (it checks the CPU's virtualization, /dev/kvm
// and libkrunfw), and the session image in msb's cache. Image "" means
// microvm.DefaultImage, which must be cached; a named one may be pulled.
// Last comes whether this build bundles the guest agent (a warning only:
// without it every call is one msb exec).
func msbChecks(ctx context.Context, o DoctorOptions) []Check {
	p, err := exec.LookPath(o.msbBinary())
	if err != nil {
		return []Check{failCheck("msb binary", fmt.Sprintf("%s not found: set --msb or OMA_MSB, or install microsandbox (%v)", o.msbBinary(), err)), agentCheck()}
	}
	run := func(args ...string) (*msb.Result, error) {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		return (&msb.CLI{Path: p, Logger: o.logger()}).Run(ctx, msb.Call{Args: args})
	}
	out := []Check{okCheck("msb binary", p)}
	res, err := run("--version")
	out = append(out, versionCheck(res, err))
	res, err = run("doctor")
	out = append(out, doctorCheck(res, err))
	image := o.Image
	explicit := image != ""
	if !explicit {
		image = microvm.DefaultImage
	}
	_, err = run("image", "inspect", image, "--format", "json")
	return append(out, imageCheck(image, explicit, err), agentCheck())
}

// agentCheck says how msb sessions get the guest agent: bundled for the
// guest's architecture (make agent embeds it), or this program serving as
// its own (a static Linux build of that architecture); else msb sessions
// are refused, since the agent runs every tool call, and the check fails
// saying how to fix it.
func agentCheck() Check {
	return msbAgentCheck(bundle.GuestArch(), bundle.Binary, selfagent.Guest)
}

func msbAgentCheck(arch string, bundled func(string) ([]byte, bool), self func(string) (bool, string)) Check {
	const name = "guest agent"
	if bin, ok := bundled(arch); ok {
		return okCheck(name, fmt.Sprintf("bundled for linux/%s (%d KiB): calls travel over one channel per session", arch, len(bin)>>10))
	}
	if ok, why := self(arch); !ok {
		return failCheck(name, fmt.Sprintf("not bundled for linux/%s, and this program cannot serve as its own in a guest (%s): "+
			"every msb session is refused, the agent running every tool call; build with make build, or with CGO_ENABLED=0", arch, why))
	}
	return okCheck(name, fmt.Sprintf("not bundled for linux/%s (built without make agent): this program, a static build, serves as the agent in the guest; calls travel over one channel per session", arch))
}

// localAgentCheck says how a local session's calls run the guest agent's
// builtins: on Linux, with the agent bundled for this host or, in a build
// without it, with this program serving as its own.
func localAgentCheck(goos, goarch string, root bool, bundled func(string) ([]byte, bool)) Check {
	const name = "guest agent"
	if goos != "linux" {
		return failCheck(name, "serves Linux only, and it runs every tool call: no local session runs on "+goos)
	}
	where := "a session's calls, from every process, run in its resident sandbox"
	if !root {
		where += ", its commands in a pid namespace apart from the agent"
	}
	bin, ok := bundled(goarch)
	if !ok {
		if !root {
			// Apart from its commands, the agent drops its capabilities
			// on every thread, which a cgo build cannot.
			where += " (where this program was built without cgo; else each call runs in a sandbox of its own)"
		}
		return okCheck(name, "not bundled for linux/"+goarch+" (built without make agent): this program serves as the agent; "+where)
	}
	return okCheck(name, fmt.Sprintf("bundled for linux/%s (%d KiB): %s", goarch, len(bin)>>10, where))
}

func versionCheck(res *msb.Result, err error) Check {
	const name = "msb version"
	if err != nil {
		return failCheck(name, err.Error())
	}
	text := strings.TrimSpace(string(res.Stdout))
	v, ok := strings.CutPrefix(text, "msb ")
	if !ok {
		return failCheck(name, fmt.Sprintf("msb --version printed %q, not \"msb VERSION\"", text))
	}
	tested := fmt.Sprintf("the tested range %s to %s", oldestTestedMsb, newestTestedMsb)
	if !versionBetween(v, oldestTestedMsb, newestTestedMsb) {
		return warnCheck(name, fmt.Sprintf("%s, outside %s: it may refuse or misread what oma-sandbox sends", v, tested))
	}
	return okCheck(name, fmt.Sprintf("%s, within %s", v, tested))
}

// versionBetween reports whether dotted version v is within lo..hi; a
// version that is not three numbers is not.
func versionBetween(v, lo, hi string) bool {
	a, ok := parseVersion(v)
	l, _ := parseVersion(lo)
	h, _ := parseVersion(hi)
	return ok && compareVersion(a, l) >= 0 && compareVersion(a, h) <= 0
}

func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func compareVersion(a, b [3]int) int {
	for i := range a {
		if a[i] != b[i] {
			return a[i] - b[i]
		}
	}
	return 0
}

// doctorCheck turns `msb doctor`'s exit status into the verdict, and its
// "error:" line and "→" hints into the reason.
func doctorCheck(res *msb.Result, err error) Check {
	const name = "msb doctor"
	var exitErr *msb.ExitError
	switch {
	case err == nil:
		return okCheck(name, "passed: this host can boot msb's microVMs")
	case !errors.As(err, &exitErr) || res == nil:
		return failCheck(name, err.Error())
	}
	var reason string
	var hints []string
	for _, line := range strings.Split(msb.StripANSI(string(res.Stderr)), "\n") {
		line = strings.TrimSpace(line)
		if r, ok := strings.CutPrefix(line, "error:"); ok && reason == "" {
			reason = strings.TrimSpace(r)
		} else if h, ok := strings.CutPrefix(line, "→"); ok && reason != "" {
			hints = append(hints, strings.TrimSpace(h))
		}
	}
	if reason == "" {
		return failCheck(name, err.Error())
	}
	if len(hints) > 0 {
		reason += " (" + strings.Join(hints, "; ") + ")"
	}
	return failCheck(name, "failed: "+reason)
}

// imageCheck: the default image is in no registry, so msb can only run it
// from its cache; an image the caller named may be pulled on create.
func imageCheck(image string, explicit bool, err error) Check {
	name := "image"
	var exitErr *msb.ExitError
	switch {
	case errors.As(err, &exitErr) && errors.Is(err, msb.ErrInstallInProgress):
		// Not the image's doing: msb refuses every command.
		return failCheck("msb state", fmt.Sprintf("msb refuses every command until %s (%s from now): its install lease is held, "+
			"as an msb killed while it opened its database leaves it; it clears by itself then",
			exitErr.RetryAt.Format(time.RFC3339), time.Until(exitErr.RetryAt).Round(time.Second)))
	case err == nil:
		return okCheck(name, image+" is cached")
	case !strings.Contains(err.Error(), "image not found"):
		return failCheck(name, fmt.Sprintf("%s: %v", image, err))
	case explicit:
		return warnCheck(name, image+" is not cached: msb pulls it when the session is created")
	}
	return failCheck(name, image+" is not cached: build and load it with `make image` in the oma-sandbox checkout, or pass --image with another image")
}
