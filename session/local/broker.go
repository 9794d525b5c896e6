package local

// brokerName is the Windows sandbox broker this backend drives.
const brokerName = "brambo-windows-sandbox-broker"

// brokerRunArgv runs argv under the broker, confined to root with cwd
// inside it and no network.
func brokerRunArgv(broker, root, cwd string, argv []string) []string {
	a := []string{broker, "run", "--workspace-root", root, "--working-directory", cwd,
		"--network", "disabled", "--workspace-transfer", "controlled", "--cleanup", "always", "--"}
	return append(a, argv...)
}

// brokerSelfTestArgv is the broker's own isolation self-test; the broker
// counts only if it passes.
func brokerSelfTestArgv(broker string) []string {
	return []string{broker, "self-test", "--network", "disabled", "--cleanup"}
}
