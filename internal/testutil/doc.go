// Package testutil holds test helpers shared across packages: for those
// that remove or confine what a guest wrote (on Linux), deep directory
// chains, symlink swap racers, a lowered descriptor limit and re-running
// tests as an unprivileged user; loopback servers and metric sums; and
// which packages a command links.
package testutil
