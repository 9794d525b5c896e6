package main

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// newMetrics returns a meter provider and the handler that serves its
// instruments in the Prometheus text format, from a registry of their own:
// nothing global is installed.
func newMetrics() (*sdkmetric.MeterProvider, http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
