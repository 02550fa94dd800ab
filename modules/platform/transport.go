package platform

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Transport is an HTTP/1.1 RoundTripper that writes request headers in a
// browser's order (the connection-signature profile's HeaderOrder): Go's own
// transport sorts them, which no browser does. It keeps a few warm
// connections per host and calls a request's Gate (see WithGate) after the
// connection is ready and right before the first byte is written — the last
// moment a booking can still be refused as NOT_SENT.
type Transport struct {
	// Order is the header order; headers not named in it follow, sorted.
	Order []string
	// DialTimeout bounds connecting (default 10 s).
	DialTimeout time.Duration
	// TLS is the client TLS config for https (nil: defaults).
	TLS *tls.Config
	// MaxIdle is the number of warm connections kept per host (default 2).
	MaxIdle int
	// Admit, when set, counts each request right before it is written (after
	// the Gate) or refuses it: an error sends nothing (SessionOptions.Admit).
	Admit func(*http.Request) error
	// Dial, when set, opens the connections (SessionOptions.Dial: the
	// agent's egress guard); nil: a net.Dialer with DialTimeout.
	Dial DialFunc

	mu   sync.Mutex
	idle map[string][]*tconn
}

type tconn struct {
	net.Conn
	br *bufio.Reader
}

type gateKey struct{}

// WithGate returns a context whose requests call g right before they are
// written. If g fails, nothing is written and RoundTrip returns an error
// wrapping ErrNotSent.
func WithGate(ctx context.Context, g Gate) context.Context {
	return context.WithValue(ctx, gateKey{}, g)
}

func hostPort(req *http.Request) string {
	host := req.URL.Host
	if req.URL.Port() == "" {
		if req.URL.Scheme == "https" {
			host += ":443"
		} else {
			host += ":80"
		}
	}
	return host
}

func (t *Transport) get(ctx context.Context, req *http.Request) (*tconn, error) {
	key := req.URL.Scheme + "://" + hostPort(req)
	t.mu.Lock()
	if n := len(t.idle[key]); n > 0 {
		c := t.idle[key][n-1]
		t.idle[key] = t.idle[key][:n-1]
		t.mu.Unlock()
		return c, nil
	}
	t.mu.Unlock()
	to := t.DialTimeout
	if to <= 0 {
		to = 10 * time.Second
	}
	var nc net.Conn
	var err error
	if t.Dial != nil {
		dctx, cancel := context.WithTimeout(ctx, to)
		nc, err = t.Dial(dctx, "tcp", hostPort(req))
		cancel()
	} else {
		d := net.Dialer{Timeout: to, KeepAlive: 30 * time.Second}
		nc, err = d.DialContext(ctx, "tcp", hostPort(req))
	}
	if err != nil {
		return nil, err
	}
	if req.URL.Scheme == "https" {
		cfg := &tls.Config{}
		if t.TLS != nil {
			cfg = t.TLS.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = req.URL.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	return &tconn{Conn: nc, br: bufio.NewReader(nc)}, nil
}

func (t *Transport) put(req *http.Request, c *tconn) {
	key := req.URL.Scheme + "://" + hostPort(req)
	max := t.MaxIdle
	if max <= 0 {
		max = 2
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.idle == nil {
		t.idle = map[string][]*tconn{}
	}
	if len(t.idle[key]) >= max {
		_ = c.Close()
		return
	}
	t.idle[key] = append(t.idle[key], c)
}

// CloseIdle closes the warm connections.
func (t *Transport) CloseIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, cs := range t.idle {
		for _, c := range cs {
			_ = c.Close()
		}
		delete(t.idle, k)
	}
}

// header renders the request head in the profile's order.
func (t *Transport) header(req *http.Request) ([]byte, error) {
	h := req.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	h.Set("Host", host)
	if h.Get("Connection") == "" {
		h.Set("Connection", "keep-alive")
	}
	if req.Body != nil && req.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(req.ContentLength, 10))
	} else if req.Body != nil {
		return nil, errors.New("platform: request body without a known length")
	} else if req.Method == http.MethodPost || req.Method == http.MethodPut {
		h.Set("Content-Length", "0")
	}
	var b strings.Builder
	b.WriteString(req.Method + " " + req.URL.RequestURI() + " HTTP/1.1\r\n")
	done := map[string]bool{}
	write := func(name string) {
		ck := http.CanonicalHeaderKey(name)
		if done[ck] {
			return
		}
		vs, ok := h[ck]
		if !ok {
			return
		}
		done[ck] = true
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n") {
				continue
			}
			b.WriteString(name + ": " + v + "\r\n")
		}
	}
	for _, name := range t.Order {
		write(name)
	}
	rest := make([]string, 0, len(h))
	for k := range h {
		if !done[k] {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		write(k)
	}
	b.WriteString("\r\n")
	return []byte(b.String()), nil
}

// RoundTrip implements http.RoundTripper for http and https over HTTP/1.1.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("platform: unsupported scheme %q", req.URL.Scheme)
	}
	head, err := t.header(req)
	if err != nil {
		return nil, err
	}
	var body []byte
	if req.Body != nil {
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("platform: read request body: %w", err)
		}
	}
	c, err := t.get(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("platform: connect: %w", err)
	}
	if g, _ := ctx.Value(gateKey{}).(Gate); g != nil {
		if err := g(); err != nil {
			t.put(req, c)
			return nil, fmt.Errorf("%w: %v", ErrNotSent, err)
		}
	}
	if t.Admit != nil {
		if err := t.Admit(req); err != nil {
			t.put(req, c)
			return nil, fmt.Errorf("%w: %w", ErrNotSent, err)
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Time{})
	}
	if _, err := c.Write(append(head, body...)); err != nil {
		stop()
		_ = c.Close()
		return nil, fmt.Errorf("platform: write request: %w", err)
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		stop()
		_ = c.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("platform: read response: %w", ctx.Err())
		}
		return nil, fmt.Errorf("platform: read response: %w", err)
	}
	keep := !resp.Close && !req.Close
	resp.Body = &body2{ReadCloser: resp.Body, done: func(clean bool) {
		stop()
		if clean && keep {
			_ = c.SetDeadline(time.Time{})
			t.put(req, c)
		} else {
			_ = c.Close()
		}
	}}
	switch strings.ToLower(resp.Header.Get("Content-Encoding")) {
	case "gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			_ = resp.Body.Close()
			return nil, fmt.Errorf("platform: gzip: %w", err)
		}
		resp.Body = &decoded{Reader: zr, under: resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.ContentLength = -1
	case "deflate":
		resp.Body = &decoded{Reader: flate.NewReader(resp.Body), under: resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.ContentLength = -1
	}
	return resp, nil
}

// body2 returns its connection to the pool only when read to the end.
type body2 struct {
	io.ReadCloser
	done func(clean bool)
	eof  bool
	once sync.Once
}

func (b *body2) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *body2) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.done(b.eof && err == nil) })
	return err
}

type decoded struct {
	io.Reader
	under io.ReadCloser
}

func (d *decoded) Close() error { return d.under.Close() }
