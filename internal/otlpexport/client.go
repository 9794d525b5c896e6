package otlpexport

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The official exporters' limits: a request before compression, a
// response body.
const (
	maxRequestSize  = 64 << 20
	maxResponseSize = 4 << 20
)

const userAgent = "oma-sandbox-otlpexport"

var errInsecureTLS = errors.New("insecure HTTP endpoint cannot use TLS client configuration")

// client posts one signal's export requests to its endpoint.
type client struct {
	url      string
	header   http.Header
	gzip     bool
	http     *http.Client
	retry    retryPolicy
	rejected string // what a partial success counts: "spans", ...
}

func newClient(c config, rejected string) (*client, error) {
	if c.insecure && c.tls != nil {
		return nil, errInsecureTLS
	}
	h := http.Header{}
	h.Set("User-Agent", userAgent)
	for k, v := range c.headers {
		h.Set(k, v)
	}
	h.Set("Content-Type", "application/x-protobuf")
	if c.gzip {
		h.Set("Content-Encoding", "gzip")
	}
	return &client{
		url:    c.url(),
		header: h,
		gzip:   c.gzip,
		// As net/http's DefaultTransport, but one of our own that nothing
		// else changes and whose connections close with the exporter.
		http: &http.Client{Timeout: c.timeout, Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:       c.tls,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}},
		retry:    defaultRetry,
		rejected: rejected,
	}, nil
}

// close releases the idle connections.
func (c *client) close() { c.http.CloseIdleConnections() }

// upload sends an export request's body, retrying what may succeed later.
func (c *client) upload(ctx context.Context, body []byte) error {
	if len(body) > maxRequestSize {
		return fmt.Errorf("request body too large: exceeded %d bytes", maxRequestSize)
	}
	if c.gzip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write(body) // into memory: cannot fail
		_ = zw.Close()
		body = b.Bytes()
	}
	return c.retry.do(ctx, func(ctx context.Context) error { return c.post(ctx, body) })
}

// post makes one attempt; a failure worth another is a *retryable.
func (c *client) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = c.header.Clone()
	resp, err := c.http.Do(req)
	if err != nil {
		// An attempt's timeout, for one; a refused connection is not.
		var ue *url.Error
		if errors.As(err, &ue) && ue.Temporary() {
			return &retryable{err: err}
		}
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseSize+1))
	if err != nil {
		return err
	}
	if len(data) > maxResponseSize {
		return fmt.Errorf("response body too large: exceeded %d bytes", maxResponseSize)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		if resp.Header.Get("Content-Type") != "application/x-protobuf" {
			return nil
		}
		return c.partialSuccess(data)
	}
	msg := strings.TrimSpace(string(data))
	if msg == "" {
		msg = "(empty)"
	}
	err = fmt.Errorf("failed to send to %s: %s (body: %s)", c.url, resp.Status, msg)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &retryable{err: err, after: retryAfter(resp.Header.Get("Retry-After"))}
	}
	return err
}

// partialSuccess reads an Export{Trace,Metrics}ServiceResponse: an error
// when its partial_success (1) says items were rejected (1) or has a
// message (2). The export is not retried: it was accepted.
func (c *client) partialSuccess(resp []byte) error {
	var rejected int64
	var msg string
	var inner error
	err := eachField(resp, func(num, wire int, _ uint64, ps []byte) {
		if num == 1 && wire == wireBytes {
			inner = eachField(ps, func(num, wire int, v uint64, data []byte) {
				switch {
				case num == 1 && wire == wireVarint:
					rejected = int64(v)
				case num == 2 && wire == wireBytes:
					msg = string(data)
				}
			})
		}
	})
	if err := errors.Join(err, inner); err != nil {
		return fmt.Errorf("export response: %w", err)
	}
	if rejected == 0 && msg == "" {
		return nil
	}
	if msg == "" {
		msg = "empty message"
	}
	return fmt.Errorf("OTLP partial success: %s (%d %s rejected)", msg, rejected, c.rejected)
}

// retryable is a failed attempt that another may mend, no sooner than
// after (the server's Retry-After).
type retryable struct {
	err   error
	after time.Duration
}

func (r *retryable) Error() string { return r.err.Error() }

// retryAfter is a Retry-After header's delay: seconds or a date; 0 when
// absent or unreadable.
func retryAfter(v string) time.Duration {
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		if s > math.MaxInt64/int64(time.Second) {
			return math.MaxInt64
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// retryPolicy is the official exporters' exponential backoff: delays from
// initial, growing by half each time up to max, each randomised by ±50%
// and lengthened to what the server asked; no attempt once maxElapsed
// has passed (or would, waiting as asked) since the first.
type retryPolicy struct {
	initial, max, maxElapsed time.Duration
}

var defaultRetry = retryPolicy{initial: 5 * time.Second, max: 30 * time.Second, maxElapsed: time.Minute}

// backoff returns the successive delays between attempts, before the
// server's say.
func (p retryPolicy) backoff() func() time.Duration {
	interval := p.initial
	return func() time.Duration {
		d := interval/2 + rand.N(interval+1)
		interval = min(interval*3/2, p.max)
		return d
	}
}

// do makes attempts until one succeeds, fails for good, or ctx ends.
func (p retryPolicy) do(ctx context.Context, attempt func(context.Context) error) error {
	start := time.Now()
	next := p.backoff()
	for {
		err := attempt(ctx)
		r, ok := err.(*retryable) // as post returns it, never wrapped
		if !ok {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", context.Cause(ctx), r.err)
		}
		if time.Since(start)+r.after > p.maxElapsed {
			return fmt.Errorf("max retry time elapsed: %w", r.err)
		}
		t := time.NewTimer(max(r.after, next()))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", context.Cause(ctx), r.err)
		case <-t.C:
		}
	}
}
