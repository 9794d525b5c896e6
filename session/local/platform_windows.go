package local

import (
	"context"
	"os"
	"os/exec"
	"time"

	"github.com/oma-sandbox/oma-sandbox/session"
)

const brokerSelfTestTimeout = 10 * time.Second

// brokerOnly is why controls beyond the broker's self-test are partial.
const brokerOnly = "the broker's self-test proves filesystem and network isolation; a call is ended by killing the broker, whose cleanup takes its sandbox down"

// windowsPlatform runs each call through the Windows sandbox broker,
// confined to the session's box directory. Commands see host paths.
type windowsPlatform struct{ broker string }

func (p *windowsPlatform) paths(d hostDirs) session.Paths {
	return session.Paths{Workspace: d.Workspace, Uploads: d.Uploads, Outputs: d.Outputs, Skills: d.Skills}
}

func (p *windowsPlatform) prepare(hostDirs) error { return nil }

func (p *windowsPlatform) owner(hostDirs, string) (int, int, bool) { return 0, 0, false }

func (p *windowsPlatform) launch(c call) (*launched, error) {
	argv := brokerRunArgv(p.broker, c.dirs.Box, c.workdir, c.argv)
	cmd := &exec.Cmd{Path: argv[0], Args: argv, Env: []string{"PATH=" + os.Getenv("PATH"), "SystemRoot=" + os.Getenv("SystemRoot")}}
	return &launched{cmd: cmd, finish: func() []string { return nil }}, nil
}

func probeHost(ctx context.Context, _ probeRequest) (Capabilities, platform) {
	// The broker has one confinement: a writable workspace root, no network.
	caps := Capabilities{Platform: "windows", Limits: map[string]Control{}, Modes: []Mode{ModeWorkspaceWrite}, NetworkModes: []Network{NetworkDeny}}
	for _, k := range []string{LimitMemory, LimitProcesses, LimitCPU, LimitFileSize} {
		caps.Limits[k] = none("the broker's self-test does not prove resource quotas")
	}
	fail := func(why string) (Capabilities, platform) {
		caps.Filesystem, caps.Network, caps.Process = none(why), none(why), none(why)
		caps.Limits[LimitWallTime], caps.Limits[LimitOutput] = none(why), none(why)
		caps.Resources = summarizeResources(caps.Limits)
		return caps, nil
	}
	broker, err := exec.LookPath(brokerName)
	if err != nil {
		return fail("Windows sandbox broker " + brokerName + " not found; every session is refused: " + err.Error())
	}
	if err := quiet(ctx, 3*time.Second, broker, "--version"); err != nil {
		return fail("Windows sandbox broker does not answer --version: " + err.Error())
	}
	argv := brokerSelfTestArgv(broker)
	if err := quiet(ctx, brokerSelfTestTimeout, argv[0], argv[1:]...); err != nil {
		return fail("Windows sandbox broker self-test failed; every session is refused: " + err.Error())
	}
	caps.Backend = "broker"
	caps.Filesystem = full("broker self-test passed: workspace-root confinement")
	caps.Network = full("broker self-test passed: --network disabled")
	caps.Process = partial(brokerOnly)
	caps.Limits[LimitWallTime], caps.Limits[LimitOutput] = partial(brokerOnly), partial(brokerOnly)
	caps.Resources = summarizeResources(caps.Limits)
	return caps, &windowsPlatform{broker: broker}
}

// quiet runs a probe command and reports whether it exited 0 in time.
func quiet(ctx context.Context, timeout time.Duration, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SystemRoot=" + os.Getenv("SystemRoot")}
	return cmd.Run()
}
