//go:build !unix

package sessiontest

import "os/exec"

func setProcessGroup(*exec.Cmd) {}

func killProcessGroup(c *exec.Cmd) { _ = c.Process.Kill() }

func terminate(c *exec.Cmd) { _ = c.Process.Kill() }
