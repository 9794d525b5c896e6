package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

// TestLinksNoHeavyTelemetryLibraries: every start of the CLI, a one-shot
// tool call's included, pays for the initialisation of every package it
// links, and the official OTLP exporters (with protobuf, the OTLP types
// and gRPC) and the Prometheus client cost it some 7 ms here
// (docs/BENCHMARKS.md §6a); internal/otlpexport and internal/promexport do
// their work instead. A change that links one of them again fails here.
func TestLinksNoHeavyTelemetryLibraries(t *testing.T) {
	heavy := testutil.Linked(t,
		"google.golang.org/protobuf",
		"google.golang.org/grpc",
		"go.opentelemetry.io/proto",
		"go.opentelemetry.io/otel/exporters",
		"github.com/prometheus",
	)
	assert.Empty(t, heavy, "the CLI links these")
}
