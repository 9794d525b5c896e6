package otlpexport

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
)

var oneSpan = []sdktrace.ReadOnlySpan{tracetest.SpanStub{Name: "s"}.Snapshot()}

// newTraceExporter is our exporter as the environment configures it,
// retrying at once, shut down when the test ends.
func newTraceExporter(t *testing.T) *traceExporter {
	t.Helper()
	exp, err := NewTraceExporter(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { exp.Shutdown(context.Background()) })
	e := exp.(*traceExporter)
	e.client.retry = fastRetry
	return e
}

// statusThenOK answers the first request with code, what header holds and
// a body, the rest with 200.
func statusThenOK(code int, header ...string) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 0 {
			for i := 0; i < len(header); i += 2 {
				w.Header().Set(header[i], header[i+1])
			}
			http.Error(w, "try later", code)
		}
	}
}

// TestRetry: what the official exporters retry (429, 502, 503, 504 and
// an attempt's timeout) is tried again with the same body, and what they
// do not is an error at once, naming the status and the server's words
// as they do.
func TestRetry(t *testing.T) {
	rec := newTestRecorder(t)
	for _, code := range []int{429, 502, 503, 504} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			rec.answer(statusThenOK(code))
			require.NoError(t, newTraceExporter(t).ExportSpans(t.Context(), oneSpan))
			reqs := rec.take()
			require.Len(t, reqs, 2)
			assert.Equal(t, reqs[0].body, reqs[1].body)
		})
	}
	for _, code := range []int{400, 401, 404, 413, 500, 501} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			rec.answer(func(w http.ResponseWriter, _ *http.Request, _ int) { http.Error(w, "  no, because  ", code) })
			ours := newTraceExporter(t).ExportSpans(t.Context(), oneSpan)
			require.Error(t, ours)
			assert.Len(t, rec.take(), 1)

			off, err := otlptracehttp.New(t.Context())
			require.NoError(t, err)
			defer off.Shutdown(t.Context())
			official := off.ExportSpans(t.Context(), oneSpan)
			assert.EqualError(t, ours, official.Error())
			assert.Len(t, rec.take(), 1)
		})
	}
	t.Run("attempt timeout", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "50")
		rec.answer(func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 0 {
				<-r.Context().Done() // the client gives up
			}
		})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		require.NoError(t, newTraceExporter(t).ExportSpans(ctx, oneSpan))
		assert.Len(t, rec.take(), 2)
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", fmt.Sprintf("http://127.0.0.1:%d/v1/traces", testutil.FreePort(t)))
		e := newTraceExporter(t)
		e.client.retry = retryPolicy{initial: time.Hour, max: time.Hour, maxElapsed: time.Hour}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		err := e.ExportSpans(ctx, oneSpan)
		assert.ErrorContains(t, err, "connection refused")
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "not retried")
	})
}

// TestRetryAfter: the server's Retry-After lengthens the delay; one
// beyond the minute the official policy allows ends the retries at once.
func TestRetryAfter(t *testing.T) {
	rec := newTestRecorder(t)
	rec.answer(statusThenOK(http.StatusServiceUnavailable, "Retry-After", "1"))
	start := time.Now()
	require.NoError(t, newTraceExporter(t).ExportSpans(t.Context(), oneSpan))
	assert.GreaterOrEqual(t, time.Since(start), time.Second)
	assert.Len(t, rec.take(), 2)

	rec.answer(func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Retry-After", "120")
		http.Error(w, "busy", http.StatusTooManyRequests)
	})
	e := newTraceExporter(t)
	e.client.retry = defaultRetry
	start = time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := e.ExportSpans(ctx, oneSpan)
	assert.ErrorContains(t, err, "max retry time elapsed")
	assert.ErrorContains(t, err, "429 Too Many Requests (body: busy)")
	assert.Less(t, time.Since(start), time.Second)
	assert.Len(t, rec.take(), 1)
}

// TestBackoff: the official policy's delays, 5 s growing by half each
// time up to 30 s, each within ±50%.
func TestBackoff(t *testing.T) {
	for range 20 {
		next := defaultRetry.backoff()
		interval := 5 * time.Second
		for i := range 8 {
			d := next()
			assert.GreaterOrEqual(t, d, interval/2, "delay %d", i)
			assert.LessOrEqual(t, d, interval*3/2, "delay %d", i)
			interval = min(interval*3/2, 30*time.Second)
		}
	}
}

func TestRetryAfterHeader(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"":                  0,
		"3":                 3 * time.Second,
		"-1":                0,
		"soon":              0,
		"1e400":             0,
		"99999999999999999": 1<<63 - 1,
		time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat): 0,
	} {
		assert.Equal(t, want, retryAfter(v), "%q", v)
	}
	d := retryAfter(time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
	assert.InDelta(t, time.Hour.Seconds(), d.Seconds(), 2)
}

// TestRetryGivesUp: retries end once the policy's time has passed, with
// the last failure; and when the context ends, at once.
func TestRetryGivesUp(t *testing.T) {
	rec := newTestRecorder(t)
	rec.answer(func(w http.ResponseWriter, _ *http.Request, _ int) { http.Error(w, "down", http.StatusBadGateway) })
	e := newTraceExporter(t)
	e.client.retry.maxElapsed = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := e.ExportSpans(ctx, oneSpan)
	assert.ErrorContains(t, err, "max retry time elapsed")
	assert.ErrorContains(t, err, "502 Bad Gateway (body: down)")
	assert.Greater(t, len(rec.take()), 2)

	t.Run("context ends while waiting", func(t *testing.T) {
		e := newTraceExporter(t)
		e.client.retry = defaultRetry
		ctx, cancel := context.WithCancel(t.Context())
		rec.answer(func(w http.ResponseWriter, _ *http.Request, _ int) {
			time.AfterFunc(100*time.Millisecond, cancel) // once the answer is in
			http.Error(w, "down", http.StatusServiceUnavailable)
		})
		start := time.Now()
		err := e.ExportSpans(ctx, oneSpan)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorContains(t, err, "503 Service Unavailable")
		assert.Less(t, time.Since(start), time.Second)
		assert.Len(t, rec.take(), 1)
	})
	t.Run("context ends during an attempt", func(t *testing.T) {
		rec.answer(func(w http.ResponseWriter, r *http.Request, _ int) { <-r.Context().Done() })
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		err := newTraceExporter(t).ExportSpans(ctx, oneSpan)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Len(t, rec.take(), 1)
	})
	t.Run("context done before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		assert.ErrorIs(t, newTraceExporter(t).ExportSpans(ctx, oneSpan), context.Canceled)
	})
}

// TestPartialSuccess: a partial success is an error, as the official
// exporters word it, and not retried; an empty one, or a body that is
// not protobuf, is a success; one that cannot be read is an error.
func TestPartialSuccess(t *testing.T) {
	rec := newTestRecorder(t)
	answer := func(contentType string, body []byte) {
		rec.answer(func(w http.ResponseWriter, _ *http.Request, _ int) {
			w.Header().Set("Content-Type", contentType)
			w.Write(body)
		})
	}
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		return b
	}
	for _, c := range []struct {
		name        string
		contentType string
		body        []byte
		want        string // "" for no error
	}{
		{"rejected", "application/x-protobuf", marshal(&coltracepb.ExportTraceServiceResponse{
			PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 2, ErrorMessage: "too old"}}),
			"traces export: OTLP partial success: too old (2 spans rejected)"},
		{"no message", "application/x-protobuf", marshal(&coltracepb.ExportTraceServiceResponse{
			PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 1}}),
			"traces export: OTLP partial success: empty message (1 spans rejected)"},
		{"message alone", "application/x-protobuf", marshal(&coltracepb.ExportTraceServiceResponse{
			PartialSuccess: &coltracepb.ExportTracePartialSuccess{ErrorMessage: "heads up"}}),
			"traces export: OTLP partial success: heads up (0 spans rejected)"},
		{"empty", "application/x-protobuf", marshal(&coltracepb.ExportTraceServiceResponse{
			PartialSuccess: &coltracepb.ExportTracePartialSuccess{}}), ""},
		{"not protobuf", "text/plain", []byte("\xff\xff"), ""},
		{"malformed", "application/x-protobuf", []byte("\x0a\x05ab"), "malformed protobuf"},
	} {
		t.Run(c.name, func(t *testing.T) {
			answer(c.contentType, c.body)
			err := newTraceExporter(t).ExportSpans(t.Context(), oneSpan)
			off, offErr := otlptracehttp.New(t.Context())
			require.NoError(t, offErr)
			defer off.Shutdown(t.Context())
			official := off.ExportSpans(t.Context(), oneSpan)
			assert.Len(t, rec.take(), 2, "no retry")
			if c.want == "" {
				assert.NoError(t, err)
				assert.NoError(t, official)
				return
			}
			assert.ErrorContains(t, err, c.want)
			require.Error(t, official)
			if !strings.Contains(c.want, "malformed") {
				assert.Equal(t, official.Error(), err.Error())
			}
		})
	}
	t.Run("metrics", func(t *testing.T) {
		answer("application/x-protobuf", marshal(&colmetricpb.ExportMetricsServiceResponse{
			PartialSuccess: &colmetricpb.ExportMetricsPartialSuccess{RejectedDataPoints: 3, ErrorMessage: "bad"}}))
		exp, err := NewMetricExporter(t.Context())
		require.NoError(t, err)
		defer exp.Shutdown(t.Context())
		assert.EqualError(t, exp.Export(t.Context(), &metricdata.ResourceMetrics{}),
			"failed to upload metrics: OTLP partial success: bad (3 metric data points rejected)")
		rec.take()
	})
	t.Run("response too large", func(t *testing.T) {
		answer("application/x-protobuf", make([]byte, maxResponseSize+1))
		assert.ErrorContains(t, newTraceExporter(t).ExportSpans(t.Context(), oneSpan), "response body too large")
		rec.take()
	})
}

// TestShutdownClosesConnections: the connection an exporter keeps alive
// is closed by its Shutdown, not left for the server to close.
func TestShutdownClosesConnections(t *testing.T) {
	closed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	waitClosed := func() {
		t.Helper()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the connection is still open")
		}
	}

	traces, err := NewTraceExporter(t.Context())
	require.NoError(t, err)
	require.NoError(t, traces.ExportSpans(t.Context(), oneSpan))
	require.NoError(t, traces.Shutdown(t.Context()))
	waitClosed()

	metrics, err := NewMetricExporter(t.Context())
	require.NoError(t, err)
	require.NoError(t, metrics.Export(t.Context(), &metricdata.ResourceMetrics{}))
	require.NoError(t, metrics.Shutdown(t.Context()))
	waitClosed()
}
