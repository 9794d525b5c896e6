package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// newMetrics returns a meter provider and the handler that serves its
// instruments in the Prometheus text format, from a registry of their own:
// nothing global is installed. The provider also exports over OTLP when
// the environment asks for it.
func (c *cli) newMetrics(ctx context.Context) (*sdkmetric.MeterProvider, http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithReader(exp)}
	if t := c.telemetry; t != nil && t.metrics {
		otlp, err := t.metricReader(ctx)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, sdkmetric.WithReader(otlp), sdkmetric.WithResource(t.res))
	}
	return sdkmetric.NewMeterProvider(opts...), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
