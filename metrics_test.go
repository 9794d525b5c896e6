package omasandbox_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	omasandbox "github.com/oma-sandbox/oma-sandbox"
	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/internal/fakemsbtest"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"
	"github.com/oma-sandbox/oma-sandbox/msb"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// TestMetrics runs create → write → read → a failing read → upload → bash
// → collect → close on both backends with a manual reader, and reads the
// instruments back.
func TestMetrics(t *testing.T) {
	for _, backend := range []string{"local", "msb"} {
		t.Run(backend, func(t *testing.T) { testMetrics(t, backend) })
	}
}

func testMetrics(t *testing.T, backend string) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	o := omasandbox.Options{Backend: backend, WorkspaceID: "w1", StateDir: t.TempDir(), MeterProvider: mp}
	if backend == "msb" {
		o.Msb = fakemsbtest.New(t).Bin
	}
	ctx := context.Background()
	s, err := omasandbox.Open(ctx, o)
	require.NoError(t, err)
	require.NoError(t, s.Write(ctx, "m.txt", []byte("hi\n")))
	_, err = s.Read(ctx, "m.txt", omasandbox.ReadOptions{})
	require.NoError(t, err)
	_, err = s.Read(ctx, "missing.txt", omasandbox.ReadOptions{})
	require.Error(t, err)
	require.NoError(t, s.Upload(ctx, omasandbox.UploadFile{Path: "u.txt", Content: []byte("12345")}))
	_, err = s.Bash(ctx, "printf 1234567 > "+s.Paths().Outputs+"/o.txt", omasandbox.BashOptions{})
	require.NoError(t, err)
	_, err = s.CollectOutputs(ctx, t.TempDir())
	require.NoError(t, err)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	assert.Equal(t, int64(1), testutil.SumOf(t, rm, omasandbox.SessionsCreatedMetric, attribute.String("oma.backend", backend)))
	assert.Equal(t, int64(1), testutil.SumOf(t, rm, omasandbox.SessionsOpenMetric, attribute.String("oma.backend", backend)))
	calls := histogramCounts(t, rm, tools.DurationMetric)
	assert.Equal(t, map[string]uint64{
		"write ok " + backend: 1, "read ok " + backend: 1, "read tool_error " + backend: 1, "bash ok " + backend: 1,
	}, calls)
	assert.Equal(t, int64(5), testutil.SumOf(t, rm, omasandbox.UploadedBytesMetric, attribute.String("oma.backend", backend)))
	assert.Equal(t, int64(7), testutil.SumOf(t, rm, omasandbox.CollectedBytesMetric, attribute.String("oma.backend", backend)))
	// The calls went to the guest agent: on its channel where the session
	// has one (msb; local as root, its resident sandbox), else by a
	// process each. Every one named a builtin: write, the reads, bash, the
	// outputs' listing and fetch (the upload, root's, may take another
	// route); none ran a script.
	b := attribute.String("oma.backend", backend)
	route := "channel"
	if backend == "local" && os.Geteuid() != 0 {
		route = "own"
	}
	r := attribute.String("oma.route", route)
	opened := testutil.SumOf(t, rm, agentchan.ChannelEventsMetric, b, attribute.String("oma.event", string(agentchan.Opened)))
	assert.Equal(t, int64(map[string]int{"channel": 1, "own": 0}[route]), opened, "channel opens")
	assert.GreaterOrEqual(t, testutil.SumOf(t, rm, agentchan.CallsMetric, b, r, attribute.String("oma.ran", "builtin")), int64(6), "builtin calls")
	assert.Zero(t, testutil.SumOf(t, rm, agentchan.CallsMetric, b, attribute.String("oma.ran", "script")), "script calls")
	assert.Zero(t, testutil.SumOf(t, rm, agentchan.CallsMetric, b, attribute.String("oma.ran", "script_fallback")), "fallbacks")
	assert.Zero(t, testutil.SumOf(t, rm, agentchan.ChannelEventsMetric, b, attribute.String("oma.event", string(agentchan.Died))), "deaths")

	require.NoError(t, s.Close(ctx))
	require.NoError(t, reader.Collect(ctx, &rm))
	assert.Equal(t, int64(0), testutil.SumOf(t, rm, omasandbox.SessionsOpenMetric, attribute.String("oma.backend", backend)), "closed")
	if backend == "msb" {
		for _, sub := range []string{"create", "remove"} {
			assert.Equal(t, int64(1), testutil.SumOf(t, rm, msb.InvocationsMetric,
				attribute.String("oma.msb.subcommand", sub), attribute.String("oma.msb.outcome", msb.OutcomeOK)), sub)
		}
		assert.Positive(t, testutil.SumOf(t, rm, msb.InvocationsMetric, attribute.String("oma.msb.subcommand", "exec"), attribute.String("oma.msb.outcome", msb.OutcomeOK)))
	}
}

// histogramCounts are a histogram's counts by "tool result backend".
func histogramCounts(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			require.True(t, ok, "%s is a %T", name, m.Data)
			for _, dp := range h.DataPoints {
				tool, _ := dp.Attributes.Value("gen_ai.tool.name")
				result, _ := dp.Attributes.Value("oma.result")
				backend, _ := dp.Attributes.Value("oma.backend")
				out[tool.AsString()+" "+result.AsString()+" "+backend.AsString()] = dp.Count
				assert.Positive(t, dp.Sum, "durations are recorded")
			}
		}
	}
	return out
}
