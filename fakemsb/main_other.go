//go:build !linux

// Command fakemsb simulates msb with Linux namespaces (bubblewrap, nsenter,
// openat2), so it runs on Linux only; elsewhere it says so and exits 2.
package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	fmt.Fprintf(os.Stderr, "error: fakemsb runs on Linux only (it simulates msb with Linux namespaces); this is %s\n", runtime.GOOS)
	os.Exit(2)
}
