//go:build !unix

package fakemsbtest

import "os"

// Binary skips before these are reached: fakemsb runs on Linux only.

func lockShared(*os.File) error { return nil }

func killPid(int) {}
