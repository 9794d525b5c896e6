package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoHeavyTelemetryLibraries: every start of the CLI, a one-shot
// tool call's included, pays for the initialisation of every package it
// links, and the official OTLP exporters (with protobuf, the OTLP types
// and gRPC) and the Prometheus client cost it some 7 ms here
// (docs/BENCHMARKS.md §6a); internal/otlpexport and internal/promexport do
// their work instead. A change that links one of them again fails here.
func TestLinksNoHeavyTelemetryLibraries(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, heavy := range []string{
			"google.golang.org/protobuf/",
			"google.golang.org/grpc",
			"go.opentelemetry.io/proto/",
			"go.opentelemetry.io/otel/exporters/",
			"github.com/prometheus/",
		} {
			if strings.HasPrefix(pkg, heavy) {
				t.Errorf("the CLI links %s", pkg)
			}
		}
	}
}
