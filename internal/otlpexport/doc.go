// Package otlpexport exports spans and metrics over OTLP/HTTP with binary
// protobuf, in place of the official otlptracehttp and otlpmetrichttp
// exporters (v1.47.0), whose initialisation (google.golang.org/protobuf,
// the generated OTLP types, gRPC) costs a one-shot CLI command several
// milliseconds of its start. The protobuf encoding is written by hand;
// tests hold it equal to the official exporters' requests.
//
// As the official exporters, it reads OTEL_EXPORTER_OTLP_ENDPOINT (a
// base URL: /v1/traces or /v1/metrics is appended; default
// https://localhost:4318) and OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT
// (used as given, "/" if it has no path), the scheme choosing http or
// https, then _INSECURE, _HEADERS (key=value pairs, URL-decoded),
// _TIMEOUT (of each attempt, in ms; default 10 s), _COMPRESSION (gzip or
// none), _CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY, the signal's
// own variable winning over the general one; and, for metrics,
// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE and
// _DEFAULT_HISTOGRAM_AGGREGATION. An http endpoint with a certificate
// set is an error. It retries 429, 502, 503, 504 and an attempt's
// timeout with the same exponential backoff (5 s growing to 30 s, ±50%,
// at least the server's Retry-After), for at most a minute and as long
// as the context lasts. A partial success is an error, not retried.
// Exporting after Shutdown is an error.
//
// A value that cannot be used is ignored, as the official exporters
// ignore it, and reported through otel.Handle (they log it, and some not
// at all): a bad URL, timeout, header pair, preference or certificate
// file; an _INSECURE other than true or false (taken as false) and a
// _COMPRESSION other than gzip or none (taken as none).
//
// What differs from the official exporters, and why:
//   - There are no options, nor http/json: _PROTOCOL is not read (the
//     CLI refuses any protocol but http/protobuf), and a JSON response's
//     partial success is ignored, as the metric exporter does.
//   - No self-observability metrics (OTEL_GO_X_OBSERVABILITY).
//   - Strings are sent as they are; the official exporters refuse a whole
//     batch holding invalid UTF-8 (proto.Marshal fails), ours leaves
//     that to the collector.
//   - Its own User-Agent; a gzip request has a Content-Length rather
//     than being chunked.
//   - Each exporter has its own connections, closed by Shutdown.
//   - Error texts: a failure that ended the retries keeps its status
//     line, and a metric the encoder cannot send (an unknown aggregation
//     or temporality) is named in a joined error; left out, the rest
//     sent, as the official exporter does.
//   - NewMetricExporter, as NewTraceExporter, fails once ctx is done;
//     the trace exporter's Shutdown returns ctx's error each time, not
//     only the first.
//   - unix-abstract:// means http for traces too (only the metric
//     exporter says so; neither can reach such an endpoint).
package otlpexport
