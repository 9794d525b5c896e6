//go:build !linux

package local

const probeArg = "oma-sandbox-probe"

func sandboxProbe([]string) int { return 2 }

const residentHelperArg = "oma-sandbox-resident-helper"

func residentHelper([]string) int { return 2 }
