// Package chaos holds the chaos suite (its _test.go files): many sessions
// on fakemsb with random faults injected through FAKEMSB_FAULTS, and fewer
// on the local backend and, where they boot, on real microVMs, with random
// cancellations and a hostile guest's
// commands (swapped symbolic links, deep trees, FIFOs, forged bash
// records, processes that outlive their call), after which
// nothing may be left behind — no sandbox, no volume, no host process, no
// goroutine — no poisoned session may have lost its workspace, and every
// operation must have succeeded or failed with a typed error within its
// deadline.
package chaos
