//go:build linux

package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
)

// collector is an OTLP/HTTP receiver that keeps what it was sent.
type collector struct {
	mu      sync.Mutex
	spans   map[string][]*commonpb.KeyValue // span name → its attributes
	service []string                        // each request's service.name
	metrics []string
	sums    map[string]int64 // an int sum's total, by "name attr=value,..."
}

func newCollector(t *testing.T) (*collector, string) {
	c := &collector{spans: map[string][]*commonpb.KeyValue{}, sums: map[string]int64{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		switch r.URL.Path {
		case "/v1/traces":
			var req coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(data, &req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, rs := range req.ResourceSpans {
				c.service = append(c.service, attr(rs.Resource.Attributes, "service.name"))
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						c.spans[s.Name] = s.Attributes
					}
				}
			}
		case "/v1/metrics":
			var req colmetricpb.ExportMetricsServiceRequest
			if err := proto.Unmarshal(data, &req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, rm := range req.ResourceMetrics {
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						c.metrics = append(c.metrics, m.Name)
						for _, dp := range m.GetSum().GetDataPoints() {
							var attrs []string
							for _, kv := range dp.Attributes {
								attrs = append(attrs, kv.Key+"="+attr(dp.Attributes, kv.Key))
							}
							c.sums[m.Name+" "+strings.Join(attrs, ",")] += dp.GetAsInt()
						}
					}
				}
			}
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

func attr(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.Key != key {
			continue
		}
		if v, ok := kv.Value.Value.(*commonpb.AnyValue_IntValue); ok {
			return strconv.FormatInt(v.IntValue, 10)
		}
		return kv.Value.GetStringValue()
	}
	return ""
}

// TestTelemetryOverOTLP: with an OTLP endpoint in the environment, a
// one-shot command's spans (the session's create and close, the tool
// call under GenAI's conventions, msb's invocations) and metrics reach
// the collector before the command exits, under OTEL_SERVICE_NAME.
func TestTelemetryOverOTLP(t *testing.T) {
	for _, backend := range []string{"local", "msb"} {
		t.Run(backend, func(t *testing.T) {
			col, url := newCollector(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
			t.Setenv("OTEL_SERVICE_NAME", "oma-test")
			global := []string{"--state-dir", t.TempDir()}
			if backend == "msb" {
				global = append(global, "--msb", fakemsbtest.New(t).Bin)
			}
			var out, errOut bytes.Buffer
			code := Main(slices.Concat(global, []string{"run", "--backend", backend, "--outputs", t.TempDir(), "--",
				"bash", "-c", "echo traced; echo out > /mnt/session/outputs/o.txt"}), nil, &out, &errOut)
			require.Equal(t, 0, code, "stderr: %s", errOut.String())
			assert.Contains(t, out.String(), "traced")
			assert.NotContains(t, errOut.String(), "telemetry")

			col.mu.Lock()
			defer col.mu.Unlock()
			names := make([]string, 0, len(col.spans))
			for n := range col.spans {
				names = append(names, n)
			}
			for _, want := range []string{"session create", "execute_tool bash", "session collect", "session close"} {
				assert.Contains(t, names, want)
			}
			if backend == "msb" {
				assert.Contains(t, names, "msb create")
			}
			bash := col.spans["execute_tool bash"]
			assert.Equal(t, "bash", attr(bash, "gen_ai.tool.name"))
			assert.Equal(t, "execute_tool", attr(bash, "gen_ai.operation.name"))
			assert.Equal(t, backend, attr(bash, "oma.backend"))
			for _, s := range col.service {
				assert.Equal(t, "oma-test", s)
			}
			assert.Contains(t, col.metrics, "oma_sandbox.tool.duration")
			assert.Contains(t, col.metrics, "oma_sandbox.sessions.created")
			assert.Contains(t, col.metrics, "oma_sandbox.collected")
			assert.Equal(t, "4", attr(col.spans["session collect"], "oma.bytes"), "the bytes of out\\n")
		})
	}
}

// TestTelemetryOff: without an endpoint or an exporter named, or with
// OTEL_SDK_DISABLED, nothing is sent anywhere.
func TestTelemetryOff(t *testing.T) {
	col, url := newCollector(t)
	for _, env := range [][2]string{
		{"OTEL_SERVICE_NAME", "oma-test"},
		{"OTEL_SDK_DISABLED", "true"},
		{"OTEL_TRACES_EXPORTER", "none"},
	} {
		t.Run(env[0], func(t *testing.T) {
			t.Setenv(env[0], env[1])
			if env[0] != "OTEL_SERVICE_NAME" {
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
			}
			if env[0] == "OTEL_TRACES_EXPORTER" {
				t.Setenv("OTEL_METRICS_EXPORTER", "none")
			}
			var out, errOut bytes.Buffer
			code := Main([]string{"--state-dir", t.TempDir(), "run", "--backend", "local", "--", "true"}, nil, &out, &errOut)
			require.Equal(t, 0, code, "stderr: %s", errOut.String())
		})
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	assert.Empty(t, col.spans)
	assert.Empty(t, col.metrics)
}

// TestTelemetryRefusesWhatItCannotExport: an exporter or protocol this
// build lacks is a usage error that names the variable, before anything
// is created.
func TestTelemetryRefusesWhatItCannotExport(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", `$OTEL_EXPORTER_OTLP_PROTOCOL="grpc": this build exports OTLP over http/protobuf only`},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", `$OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json": this build exports OTLP over http/protobuf only`},
		{"OTEL_TRACES_EXPORTER", "zipkin", `$OTEL_TRACES_EXPORTER="zipkin": this build exports otlp or none`},
		{"OTEL_METRICS_EXPORTER", "prometheus", `$OTEL_METRICS_EXPORTER="prometheus": this build exports otlp or none`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
			t.Setenv(c.name, c.value)
			state := t.TempDir()
			var out, errOut bytes.Buffer
			code := Main([]string{"--state-dir", state, "session", "create", "--backend", "local"}, nil, &out, &errOut)
			assert.Equal(t, exitUsage, code)
			assert.Equal(t, "oma-sandbox: "+c.want+"\n", errOut.String())
			ents, err := os.ReadDir(state)
			require.NoError(t, err)
			assert.Empty(t, ents, "nothing created")
			assert.False(t, strings.Contains(out.String(), "oma-local"))
		})
	}
}

// TestMCPMetricsAlsoOverOTLP: the meter provider mcp --http serves at
// /metrics also exports over OTLP when the environment asks for it.
func TestMCPMetricsAlsoOverOTLP(t *testing.T) {
	col, url := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	c := &cli{stderr: io.Discard}
	tel, err := startTelemetry(t.Context(), c)
	require.NoError(t, err)
	defer tel.stop(c)
	c.telemetry = tel
	mp, handler, err := c.newMetrics(t.Context())
	require.NoError(t, err)
	counter, err := mp.Meter("test").Int64Counter("oma_test.both")
	require.NoError(t, err)
	counter.Add(t.Context(), 2)

	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Contains(t, rec.Body.String(), "oma_test_both_total")
	require.NoError(t, mp.Shutdown(t.Context()))
	col.mu.Lock()
	defer col.mu.Unlock()
	assert.Contains(t, col.metrics, "oma_test.both")
}

// TestTelemetryCollectorDown: a collector that cannot be reached costs a
// warning, not the command.
func TestTelemetryCollectorDown(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
	var out, errOut bytes.Buffer
	code := Main([]string{"--state-dir", t.TempDir(), "run", "--backend", "local", "--", "echo", "hi"}, nil, &out, &errOut)
	assert.Equal(t, 0, code, "stderr: %s", errOut.String())
	assert.Equal(t, "hi\n", out.String())
	assert.Contains(t, errOut.String(), `level=WARN msg="telemetry export failed"`)
}

// TestTelemetrySettingIgnoredIsAWarning: a variable's value the
// exporters cannot use (read before the command has its logger) is a
// warning naming it, and the command and its export go on.
func TestTelemetrySettingIgnoredIsAWarning(t *testing.T) {
	col, url := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")
	var out, errOut bytes.Buffer
	code := Main([]string{"--state-dir", t.TempDir(), "run", "--backend", "local", "--", "echo", "hi"}, nil, &out, &errOut)
	assert.Equal(t, 0, code, "stderr: %s", errOut.String())
	assert.Equal(t, "hi\n", out.String())
	assert.Contains(t, errOut.String(), `level=WARN msg="telemetry setting ignored"`)
	assert.Contains(t, errOut.String(), `$OTEL_EXPORTER_OTLP_TIMEOUT=\"soon\" ignored`)
	col.mu.Lock()
	defer col.mu.Unlock()
	assert.NotEmpty(t, col.metrics, "the metrics still reached the collector")
}

// TestTelemetryUpload: the upload command's span carries its byte count.
func TestTelemetryUpload(t *testing.T) {
	col, url := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	global := []string{"--state-dir", t.TempDir()}
	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		require.Equal(t, 0, Main(slices.Concat(global, args), nil, &out, &errOut), "%q: %s", args, errOut.String())
		return strings.TrimSpace(out.String())
	}
	host := filepath.Join(t.TempDir(), "in.txt")
	require.NoError(t, os.WriteFile(host, []byte("12345"), 0o644))
	name := run("session", "create", "--backend", "local")
	run("upload", name, host)
	run("session", "rm", name)
	col.mu.Lock()
	defer col.mu.Unlock()
	require.Contains(t, col.spans, "session upload")
	assert.Equal(t, "5", attr(col.spans["session upload"], "oma.bytes"))
	assert.Contains(t, col.metrics, "oma_sandbox.uploaded")
}

// TestTelemetryReap: a reap run exports its sweep's counts.
func TestTelemetryReap(t *testing.T) {
	col, url := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	global := []string{"--state-dir", t.TempDir()}
	var out, errOut bytes.Buffer
	require.Equal(t, 0, Main(slices.Concat(global, []string{"session", "create", "--backend", "local"}), nil, &out, &errOut), errOut.String())
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, 0, Main(slices.Concat(global, []string{"reap", "--backend", "local", "--older-than", "10ms"}), nil, &out, &errOut), errOut.String())
	col.mu.Lock()
	defer col.mu.Unlock()
	assert.Equal(t, int64(1), col.sums["oma_sandbox.reaper.sweeps oma.backend=local,oma.outcome=ok"], "%v", col.sums)
	assert.Equal(t, int64(1), col.sums["oma_sandbox.reaper.removed oma.backend=local,oma.kind=session"], "%v", col.sums)
}
