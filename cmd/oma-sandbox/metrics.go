package main

import (
	"context"
	"net/http"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/oma-sandbox/oma-sandbox/internal/promexport"
)

// newMetrics returns a meter provider and the handler that serves its
// instruments in the Prometheus text format, from an exporter of their own:
// nothing global is installed. The provider also exports over OTLP when
// the environment asks for it.
func (c *cli) newMetrics(ctx context.Context) (*sdkmetric.MeterProvider, http.Handler, error) {
	exp := promexport.New()
	opts := []sdkmetric.Option{sdkmetric.WithReader(exp)}
	if t := c.telemetry; t != nil && t.metrics {
		otlp, err := t.metricReader(ctx)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, sdkmetric.WithReader(otlp), sdkmetric.WithResource(t.res))
	}
	return sdkmetric.NewMeterProvider(opts...), exp, nil
}
