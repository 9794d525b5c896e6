package otlpexport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestEnvMatchesOfficial: for each environment, our exporter of each
// signal sends to the same URL (through the proxy: a named host's), with
// the same headers and compression, as the official exporter, or fails
// to start as it does.
func TestEnvMatchesOfficial(t *testing.T) {
	cert := writePEM(t, "ca.pem", "CERTIFICATE", newCert(t, "ca").Certificate[0])
	for _, env := range [][]string{
		{"ENDPOINT=http://collector.test:4318"},
		{"ENDPOINT=http://collector.test:4318/base/"},
		{"ENDPOINT= http://collector.test:4318/base "},
		{"ENDPOINT=HTTP://collector.test"},
		{"ENDPOINT=https://collector.test"},
		{"ENDPOINT=http://collector.test", "SIGNAL_ENDPOINT=http://other.test:9/custom/path"},
		{"SIGNAL_ENDPOINT=http://other.test:9"},
		{"SIGNAL_ENDPOINT=http://other.test:9/v1/x?query=dropped"},
		{"SIGNAL_ENDPOINT=https://other.test/x"},
		{"SIGNAL_ENDPOINT=http://other.test/%20"},
		{"ENDPOINT=http://collector.test", "OTHER_ENDPOINT=http://wrong.test"},
		{"ENDPOINT=https://collector.test:4318", "INSECURE=true"},
		{"ENDPOINT=http://collector.test", "SIGNAL_INSECURE=false"},
		{"ENDPOINT=https://collector.test", "INSECURE=false", "SIGNAL_INSECURE=TRUE"},
		{"ENDPOINT=http://collector.test", "INSECURE=yes"},
		{"ENDPOINT=http://collector.test", "OTHER_INSECURE=false"},
		{"ENDPOINT=http://collector.test", "HEADERS=api-key=s3cr%20t%2C, x-two = b ,bad,=nokey,in valid=x,x-3=%zz,"},
		{"ENDPOINT=http://collector.test", "HEADERS=a=1,b=2", "SIGNAL_HEADERS=c=3"},
		{"ENDPOINT=http://collector.test", "HEADERS=a=1", "OTHER_HEADERS=b=2"},
		{"ENDPOINT=http://collector.test", "HEADERS=Content-Type=text/plain,User-Agent=me"},
		{"ENDPOINT=http://collector.test", "COMPRESSION=gzip"},
		{"ENDPOINT=http://collector.test", "COMPRESSION=gzip", "SIGNAL_COMPRESSION=none"},
		{"ENDPOINT=http://collector.test", "SIGNAL_COMPRESSION=gzip"},
		{"ENDPOINT=http://collector.test", "COMPRESSION=GZIP"},
		{"ENDPOINT=http://collector.test", "CERTIFICATE=" + cert},
		{"ENDPOINT=https://collector.test", "SIGNAL_CERTIFICATE=" + cert},
		{"ENDPOINT=https://collector.test", "INSECURE=true", "CERTIFICATE=" + cert},
		{"ENDPOINT=http://collector.test", "CERTIFICATE=/nonexistent"},
		{"ENDPOINT=:bad", "SIGNAL_ENDPOINT=http://other.test"},
	} {
		for _, signal := range []string{"TRACES", "METRICS"} {
			t.Run(signal+" "+strings.Join(env, " "), func(t *testing.T) {
				other := map[string]string{"TRACES": "METRICS", "METRICS": "TRACES"}[signal]
				for _, kv := range env {
					k, v, _ := strings.Cut(kv, "=")
					k = strings.NewReplacer("SIGNAL", signal, "OTHER", other).Replace(k)
					t.Setenv("OTEL_EXPORTER_OTLP_"+k, v)
				}
				captureReports(t) // what the variables' errors are is tested below
				var official, ours error
				if signal == "TRACES" {
					official, ours = exportBoth(t, []sdktrace.ReadOnlySpan{tracetest.SpanStub{Name: "s"}.Snapshot()})
				} else {
					official, ours = exportMetricsBoth(t, &metricdata.ResourceMetrics{})
				}
				assert.Equal(t, official != nil, ours != nil, "official: %v, ours: %v", official, ours)
				reqs := proxy.take()
				if official != nil && len(reqs) == 0 {
					return // they fail alike, and do not send
				}
				require.Len(t, reqs, 2)
				want, got := reqs[0], reqs[1]
				assert.Equal(t, want.method+" "+want.uri, got.method+" "+got.uri)
				assert.Equal(t, compared(want.header), compared(got.header))
				if want.method == http.MethodPost {
					if signal == "TRACES" {
						requireSameTraces(t, reqs)
					} else {
						requireSameMetrics(t, reqs)
					}
				}
			})
		}
	}
}

// compared is h without what differs for good reason: our own
// User-Agent, and the Content-Length the official exporter leaves out
// of a compressed request.
func compared(h http.Header) http.Header {
	h = h.Clone()
	if ua := h.Get("User-Agent"); ua == userAgent || strings.HasPrefix(ua, "OTel ") {
		h.Del("User-Agent")
	}
	h.Del("Content-Length")
	return h
}

// TestConfig: what the official exporters' options hold, and the
// differential test above cannot see through a proxy.
func TestConfig(t *testing.T) {
	for _, c := range []struct {
		env     string
		url     string
		timeout time.Duration
	}{
		{"", "https://localhost:4318/v1/traces", 10 * time.Second},
		{"ENDPOINT=http://h:1/ TIMEOUT=500", "http://h:1/v1/traces", 500 * time.Millisecond},
		{"TIMEOUT=500 TRACES_TIMEOUT=20", "https://localhost:4318/v1/traces", 20 * time.Millisecond},
		{"TIMEOUT=0", "https://localhost:4318/v1/traces", 0},
		{"TIMEOUT=1s TRACES_TIMEOUT=1.5", "https://localhost:4318/v1/traces", 10 * time.Second},
		{"TRACES_ENDPOINT=http://h:1", "http://h:1/", 10 * time.Second},
		{"TRACES_ENDPOINT=unix:///run/otel.sock", "http:///run/otel.sock", 10 * time.Second},
		{"TRACES_ENDPOINT=v1/x", "https:///v1/x", 10 * time.Second},
	} {
		t.Run(c.env, func(t *testing.T) {
			for _, kv := range strings.Fields(c.env) {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv("OTEL_EXPORTER_OTLP_"+k, v)
			}
			captureReports(t)
			cfg := readConfig("TRACES", "/v1/traces")
			assert.Equal(t, c.url, cfg.url())
			assert.Equal(t, c.timeout, cfg.timeout)
		})
	}
}

// TestHeaders: values are URL-decoded, then trimmed as keys are; a pair
// without a key, or whose key is not an HTTP token, is left out.
func TestHeaders(t *testing.T) {
	captureReports(t)
	assert.Equal(t, map[string]string{"api-key": "s3cr t,", "x-two": "b", "x-3": "=c"},
		parseHeaders("H", "api-key=s3cr%20t%2C, x-two = %20b%09,x-3==c,bad,=nokey,in valid=x,x-4=%zz"))
}

// TestConfigReportsWhatItIgnores: a value that cannot be used is
// reported through the OTel error handler, naming the variable, and
// changes nothing.
func TestConfigReportsWhatItIgnores(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	for _, c := range []struct{ name, value, want string }{
		{"OTEL_EXPORTER_OTLP_TIMEOUT", "5s", "not a number of milliseconds"},
		{"OTEL_EXPORTER_OTLP_TRACES_INSECURE", "yes", "not true or false"},
		{"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "not gzip or none"},
		{"OTEL_EXPORTER_OTLP_HEADERS", "a=1,b", `"b" ignored: not a key=value header`},
		{"OTEL_EXPORTER_OTLP_HEADERS", "a b=1", `"a b=1" ignored: not a key=value header`},
		{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "a=%zz", `"a=%zz" ignored: invalid URL escape`},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://[::1", "missing ']'"},
		{"OTEL_EXPORTER_OTLP_CERTIFICATE", filepath.Join(dir, "missing.pem"), "no such file"},
		{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", notPEM, "no PEM certificate in it"},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			reported := captureReports(t)
			cfg := readConfig("TRACES", "/v1/traces")
			require.Len(t, *reported, 1)
			assert.ErrorContains(t, (*reported)[0], "$"+c.name+"=")
			assert.ErrorContains(t, (*reported)[0], c.want)
			assert.Equal(t, "https://localhost:4318/v1/traces", cfg.url())
			assert.Equal(t, 10*time.Second, cfg.timeout)
			assert.False(t, cfg.gzip)
			assert.Nil(t, cfg.tls)
		})
	}
	t.Run("client key pair", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", notPEM)
		t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", notPEM)
		reported := captureReports(t)
		assert.Nil(t, readConfig("TRACES", "/v1/traces").tls)
		require.Len(t, *reported, 1)
		assert.ErrorContains(t, (*reported)[0], "$OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE=")
	})
}

// TestTLS: the server's certificate is trusted from
// OTEL_EXPORTER_OTLP_[SIGNAL_]CERTIFICATE, the client's presented from
// _CLIENT_CERTIFICATE and _CLIENT_KEY; the signal's own wins.
func TestTLS(t *testing.T) {
	serverCert, clientCert, stranger := newCert(t, "127.0.0.1"), newCert(t, "client"), newCert(t, "stranger")
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(clientCert.Leaf)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused
	srv.StartTLS()
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)

	serverPEM := writePEM(t, "server.pem", "CERTIFICATE", serverCert.Certificate[0])
	strangerPEM := writePEM(t, "stranger.pem", "CERTIFICATE", stranger.Certificate[0])
	clientPEM := writePEM(t, "client.pem", "CERTIFICATE", clientCert.Certificate[0])
	clientKey, err := x509.MarshalPKCS8PrivateKey(clientCert.PrivateKey)
	require.NoError(t, err)
	clientKeyPEM := writePEM(t, "client.key", "PRIVATE KEY", clientKey)
	strangerKey, err := x509.MarshalPKCS8PrivateKey(stranger.PrivateKey)
	require.NoError(t, err)
	strangerKeyPEM := writePEM(t, "stranger.key", "PRIVATE KEY", strangerKey)

	for _, c := range []struct {
		name string
		env  map[string]string
		want string // in the error, "" for none
	}{
		{"both", map[string]string{"CERTIFICATE": serverPEM, "CLIENT_CERTIFICATE": clientPEM, "CLIENT_KEY": clientKeyPEM}, ""},
		{"signal's own", map[string]string{
			"CERTIFICATE": strangerPEM, "CLIENT_CERTIFICATE": strangerPEM, "CLIENT_KEY": strangerKeyPEM,
			"TRACES_CERTIFICATE": serverPEM, "TRACES_CLIENT_CERTIFICATE": clientPEM, "TRACES_CLIENT_KEY": clientKeyPEM,
		}, ""},
		{"server unknown", map[string]string{"CLIENT_CERTIFICATE": clientPEM, "CLIENT_KEY": clientKeyPEM}, "certificate signed by unknown authority"},
		{"signal's own server unknown", map[string]string{"CERTIFICATE": serverPEM, "TRACES_CERTIFICATE": strangerPEM,
			"CLIENT_CERTIFICATE": clientPEM, "CLIENT_KEY": clientKeyPEM}, "certificate signed by unknown authority"},
		{"no client certificate", map[string]string{"CERTIFICATE": serverPEM}, "certificate required"},
		{"client key alone", map[string]string{"CERTIFICATE": serverPEM, "CLIENT_KEY": clientKeyPEM}, "certificate required"},
		{"signal's own client unknown", map[string]string{"CERTIFICATE": serverPEM, "CLIENT_CERTIFICATE": clientPEM, "CLIENT_KEY": clientKeyPEM,
			"TRACES_CLIENT_CERTIFICATE": strangerPEM, "TRACES_CLIENT_KEY": strangerKeyPEM}, "certificate required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv("OTEL_EXPORTER_OTLP_"+k, v)
			}
			exp, err := NewTraceExporter(t.Context())
			require.NoError(t, err)
			defer exp.Shutdown(t.Context())
			err = exp.ExportSpans(t.Context(), []sdktrace.ReadOnlySpan{tracetest.SpanStub{Name: "s"}.Snapshot()})
			if c.want == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, c.want)
			}
		})
	}
}

// newCert is a self-signed certificate for name (an IP address or a
// client's name), valid for an hour.
func newCert(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func writePEM(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return p
}
