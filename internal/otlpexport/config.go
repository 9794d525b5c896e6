package otlpexport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
)

// config is one signal's export, as the environment sets it.
type config struct {
	host     string // host[:port]
	path     string
	insecure bool // http rather than https
	headers  map[string]string
	gzip     bool
	timeout  time.Duration // of one attempt
	tls      *tls.Config   // nil: the defaults
}

func (c config) url() string {
	u := url.URL{Scheme: "https", Host: c.host, Path: c.path}
	if c.insecure {
		u.Scheme = "http"
	}
	return u.String()
}

// env is the value of $OTEL_EXPORTER_OTLP_name, trimmed; "" is unset.
func env(name string) (string, string) {
	name = "OTEL_EXPORTER_OTLP_" + name
	return name, strings.TrimSpace(os.Getenv(name))
}

// ignored reports a variable's value that cannot be used, through the
// OTel error handler, as the official exporters log it.
func ignored(name, value string, err error) {
	otel.Handle(fmt.Errorf("otlpexport: $%s=%q ignored: %w", name, value, err))
}

// readConfig reads the variables of signal (TRACES or METRICS), whose
// path under a base endpoint is signalPath: each general variable, then
// the signal's own, which wins.
func readConfig(signal, signalPath string) config {
	c := config{host: "localhost:4318", path: signalPath, timeout: 10 * time.Second}
	if u := envURL("ENDPOINT"); u != nil {
		c.host, c.path, c.insecure = u.Host, path.Join(u.Path, signalPath), insecureScheme(u.Scheme)
	}
	if u := envURL(signal + "_ENDPOINT"); u != nil {
		c.host, c.path, c.insecure = u.Host, u.Path, insecureScheme(u.Scheme)
		if c.path == "" {
			c.path = "/"
		}
	}
	c.path = strings.TrimSpace(c.path)
	if c.path == "" || c.path == "." {
		c.path = signalPath
	} else if !path.IsAbs(c.path) {
		c.path = "/" + c.path
	}

	var t tls.Config
	for _, p := range []string{"", signal + "_"} {
		if pool := envCertPool(p + "CERTIFICATE"); pool != nil {
			t.RootCAs = pool
		}
		if cert := envClientCert(p+"CLIENT_CERTIFICATE", p+"CLIENT_KEY"); cert != nil {
			t.Certificates = []tls.Certificate{*cert}
		}
	}
	if t.RootCAs != nil || t.Certificates != nil {
		c.tls = &t
	}

	for _, p := range []string{"", signal + "_"} {
		if name, v := env(p + "INSECURE"); v != "" {
			c.insecure = strings.EqualFold(v, "true")
			if !c.insecure && !strings.EqualFold(v, "false") {
				ignored(name, v, errors.New("not true or false; https"))
			}
		}
		if name, v := env(p + "HEADERS"); v != "" {
			c.headers = parseHeaders(name, v)
		}
		if name, v := env(p + "COMPRESSION"); v != "" {
			c.gzip = v == "gzip"
			if !c.gzip && v != "none" {
				ignored(name, v, errors.New("not gzip or none; none"))
			}
		}
		if name, v := env(p + "TIMEOUT"); v != "" {
			if ms, err := strconv.Atoi(v); err != nil {
				ignored(name, v, errors.New("not a number of milliseconds"))
			} else {
				c.timeout = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return c
}

func insecureScheme(scheme string) bool {
	switch strings.ToLower(scheme) {
	case "http", "unix", "unix-abstract":
		return true
	}
	return false
}

func envURL(key string) *url.URL {
	name, v := env(key)
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil {
		ignored(name, v, err)
		return nil
	}
	return u
}

func envCertPool(key string) *x509.CertPool {
	name, file := env(key)
	if file == "" {
		return nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		ignored(name, file, err)
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		ignored(name, file, errors.New("no PEM certificate in it"))
		return nil
	}
	return pool
}

// envClientCert is the key pair the two variables name, nil unless both
// are set and can be read.
func envClientCert(certKey, keyKey string) *tls.Certificate {
	certName, certFile := env(certKey)
	keyName, keyFile := env(keyKey)
	if certFile == "" || keyFile == "" {
		return nil
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		ignored(certName, certFile, err)
		return nil
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		ignored(keyName, keyFile, err)
		return nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		ignored(certName, certFile, err)
		return nil
	}
	return &cert
}

// parseHeaders reads "k1=v1,k2=v2", each value URL-decoded, leaving out
// (and reporting) a pair it cannot read.
func parseHeaders(name, v string) map[string]string {
	h := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || !validHeaderKey(k) {
			ignored(name, pair, errors.New("not a key=value header"))
			continue
		}
		val, err := url.PathUnescape(val)
		if err != nil {
			ignored(name, pair, err)
			continue
		}
		h[k] = strings.TrimSpace(val)
	}
	return h
}

// validHeaderKey: an HTTP token (RFC 9110), as the official exporters
// require.
func validHeaderKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}
