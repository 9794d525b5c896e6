package otlpexport

import (
	"compress/gzip"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.uber.org/goleak"
)

// proxy stands in for every host but the loopback one, through
// $HTTP_PROXY and $HTTPS_PROXY, which net/http reads once per process:
// what an exporter sends to a named collector (collector.test) reaches
// it, the official exporters' as ours.
var proxy *recorder

func TestMain(m *testing.M) {
	proxy = newRecorder()
	os.Setenv("HTTP_PROXY", proxy.srv.URL)
	os.Setenv("HTTPS_PROXY", proxy.srv.URL)
	os.Unsetenv("NO_PROXY")
	otel.SetErrorHandler(otel.ErrorHandlerFunc(report))
	code := m.Run()
	proxy.srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// request is what a recorder was sent; body is decompressed.
type request struct {
	method, uri string
	header      http.Header
	body        []byte
}

// recorder keeps the requests it is sent and answers each with respond,
// or 200 with no body. A CONNECT (an https request through the proxy) is
// refused.
type recorder struct {
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []request
	respond func(w http.ResponseWriter, r *http.Request, n int) // n: the request's index
}

func newRecorder() *recorder {
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(rec.serve))
	return rec
}

// newTestRecorder is a recorder serving until the test ends, the
// endpoint of both signals.
func newTestRecorder(t *testing.T) *recorder {
	rec := newRecorder()
	t.Cleanup(rec.srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rec.srv.URL)
	return rec
}

func (rec *recorder) serve(w http.ResponseWriter, r *http.Request) {
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
	rec.mu.Lock()
	n := len(rec.reqs)
	rec.reqs = append(rec.reqs, request{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: data})
	respond := rec.respond
	rec.mu.Unlock()
	switch {
	case r.Method == http.MethodConnect:
		http.Error(w, "no tunnels here", http.StatusForbidden)
	case respond != nil:
		respond(w, r, n)
	}
}

// answer sets how the recorder answers from now on.
func (rec *recorder) answer(respond func(w http.ResponseWriter, r *http.Request, n int)) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.respond = respond
}

// take returns the requests so far and forgets them.
func (rec *recorder) take() []request {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	reqs := rec.reqs
	rec.reqs = nil
	return reqs
}

// fastRetry is the official policy scaled down for tests.
var fastRetry = retryPolicy{initial: time.Millisecond, max: 5 * time.Millisecond, maxElapsed: 5 * time.Second}

// reports is where what the code reports through otel.Handle goes while
// a test captures it.
var reports struct {
	mu   sync.Mutex
	errs *[]error
}

func report(err error) {
	reports.mu.Lock()
	defer reports.mu.Unlock()
	if reports.errs == nil {
		log.Print(err)
		return
	}
	*reports.errs = append(*reports.errs, err)
}

// captureReports collects, until the test ends, what is reported.
func captureReports(t *testing.T) *[]error {
	var errs []error
	reports.mu.Lock()
	reports.errs = &errs
	reports.mu.Unlock()
	t.Cleanup(func() {
		reports.mu.Lock()
		reports.errs = nil
		reports.mu.Unlock()
	})
	return &errs
}
