// Package chaos holds the chaos suite (its _test.go files): many sessions
// on fakemsb with random faults injected through FAKEMSB_FAULTS and random
// cancellations, after which nothing may be left behind — no sandbox, no
// volume, no host process, no goroutine — and every operation must have
// succeeded or failed with a typed error within its deadline.
package chaos
