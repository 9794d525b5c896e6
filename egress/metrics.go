package egress

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// RefusalsMetric counts the proxy's refusals, by backend (oma.backend)
// and kind (oma.kind, a RefusalKind).
const RefusalsMetric = "oma_sandbox.egress.refusals"

// CountRefusals returns a Proxy.Refused that counts each refusal on mp's
// RefusalsMetric for backend; nil when mp cannot make the counter.
func CountRefusals(mp metric.MeterProvider, backend string) func(*RefusedError) {
	c, err := mp.Meter("github.com/oma-sandbox/oma-sandbox/egress").Int64Counter(RefusalsMetric,
		metric.WithUnit("{refusal}"), metric.WithDescription("Egress refusals, by backend and kind"))
	if err != nil {
		return nil
	}
	b := attribute.String("oma.backend", backend)
	return func(e *RefusedError) {
		c.Add(context.Background(), 1, metric.WithAttributes(b, attribute.String("oma.kind", string(e.Kind))))
	}
}
