// Package confine holds the kernel-level restrictions a sandboxed command
// runs under beyond its namespaces: a seccomp filter (Filter, for bwrap's
// --seccomp) and a Landlock scope that keeps the host's abstract unix
// sockets out of reach (StartScoped). Linux only.
package confine
