package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/oma-sandbox/oma-sandbox/internal/otlpexport"
)

// telemetryFlushTimeout bounds how long the CLI waits, as it exits, for
// the spans and metrics still batched to reach the collector.
const telemetryFlushTimeout = 5 * time.Second

// telemetry is the OTLP export the standard OTEL_* variables ask for:
// nothing unless the user names an endpoint or an exporter. The exporters
// read the rest themselves (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
// _COMPRESSION, _CERTIFICATE, ...), as do the SDK's sampler, batch
// processor and periodic reader.
type telemetry struct {
	res      *resource.Resource
	traces   bool
	metrics  bool
	shutdown []func(context.Context) error
}

// otlpWanted reads OTEL_{signal}_EXPORTER: "otlp" exports, "none" (or
// OTEL_SDK_DISABLED=true) does not, and unset exports when an OTLP
// endpoint for the signal is set.
func otlpWanted(signal string) (bool, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	name := "OTEL_" + signal + "_EXPORTER"
	switch v := strings.TrimSpace(os.Getenv(name)); v {
	case "otlp":
	case "none":
		return false, nil
	case "":
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") == "" {
			return false, nil
		}
	default:
		return false, &usageError{msg: fmt.Sprintf("$%s=%q: this build exports otlp or none", name, v)}
	}
	for _, p := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"} {
		if v := os.Getenv(p); v != "" && v != "http/protobuf" {
			return false, &usageError{msg: fmt.Sprintf("$%s=%q: this build exports OTLP over http/protobuf only", p, v)}
		}
	}
	return true, nil
}

// startTelemetry installs the global tracer and meter providers the
// environment asks for, so the library's spans and metrics (which use the
// globals unless given providers) are exported. A bad variable is a usage
// error, before anything runs.
func startTelemetry(ctx context.Context, c *cli) (_ *telemetry, err error) {
	t := &telemetry{}
	defer func() {
		if err != nil {
			t.stop(c) // what started before the failure
		}
	}()
	if t.traces, err = otlpWanted("TRACES"); err != nil {
		return nil, err
	}
	if t.metrics, err = otlpWanted("METRICS"); err != nil {
		return nil, err
	}
	if !t.traces && !t.metrics {
		return t, nil
	}
	// An export that fails is a warning on stderr (see --log-level).
	otel.SetErrorHandler(otel.ErrorHandlerFunc(c.telemetryFailed))
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override these.
	t.res, err = resource.Merge(resource.NewSchemaless(attribute.String("service.name", "oma-sandbox"),
		attribute.String("service.version", version())), resource.Environment())
	if err != nil {
		return nil, &usageError{msg: fmt.Sprintf("$OTEL_RESOURCE_ATTRIBUTES: %v", err)}
	}
	if t.traces {
		exp, err := otlpexport.NewTraceExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(t.res))
		t.shutdown = append(t.shutdown, tp.Shutdown)
		otel.SetTracerProvider(tp)
	}
	if t.metrics {
		reader, err := t.metricReader(ctx)
		if err != nil {
			return nil, err
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(t.res))
		t.shutdown = append(t.shutdown, mp.Shutdown)
		otel.SetMeterProvider(mp)
	}
	return t, nil
}

// metricReader is a new periodic OTLP reader, or nil when metrics are not
// exported. A meter provider of the CLI's own (mcp --http's) takes one
// beside its Prometheus reader: a reader serves one provider.
func (t *telemetry) metricReader(ctx context.Context) (sdkmetric.Reader, error) {
	if !t.metrics {
		return nil, nil
	}
	exp, err := otlpexport.NewMetricExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	return sdkmetric.NewPeriodicReader(exp), nil
}

// stop flushes what is batched and ends the exporters; an export that
// fails is reported, and does not change the command's exit status.
func (t *telemetry) stop(c *cli) {
	ctx, cancel := context.WithTimeout(context.Background(), telemetryFlushTimeout)
	defer cancel()
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		c.telemetryFailed(err)
	}
	if len(t.shutdown) > 0 {
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
	}
}

// telemetryFailed reports an export that failed: a warning, through the
// logger (which serialises its writes: exports fail on the SDK's own
// goroutines too). What the exporters report before the command has set
// its logger up (a variable's value they cannot use, as they read them)
// waits for it (setupLogger).
func (c *cli) telemetryFailed(err error) {
	c.telemetryMu.Lock()
	defer c.telemetryMu.Unlock()
	if c.logger == nil {
		c.telemetryEarly = append(c.telemetryEarly, err)
		return
	}
	c.logger.Warn("telemetry export failed", "err", err)
}

// telemetryLoggerReady logs what telemetryFailed held back until the
// logger was set up.
func (c *cli) telemetryLoggerReady(logger *slog.Logger) {
	c.telemetryMu.Lock()
	defer c.telemetryMu.Unlock()
	c.logger = logger
	for _, err := range c.telemetryEarly {
		c.logger.Warn("telemetry setting ignored", "err", err)
	}
	c.telemetryEarly = nil
}
