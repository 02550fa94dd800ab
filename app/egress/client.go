package egress

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ClientOptions shape a guarded HTTP client.
type ClientOptions struct {
	// Timeout bounds a whole request, redirects included; zero means 60 s.
	Timeout time.Duration
	// MaxRedirects is the number of redirect hops followed; zero means 10,
	// negative means none (the 3xx response is returned as it is).
	MaxRedirects int
	// TLS configures certificate checks (tests give their own roots).
	TLS *tls.Config
}

// Transport returns an http.Transport whose every connection goes through
// the guard. It never reads proxy settings from the environment: an
// upstream proxy is the guard's (Config.Upstream), so the check stays on
// the address finally dialled.
func (g *Guard) Transport(tlsConf *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            g.DialContext,
		TLSClientConfig:        tlsConf,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    15 * time.Second,
		ResponseHeaderTimeout:  30 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// Client returns an HTTP client that fetches through the guard and checks
// every redirect hop: each hop is a new dial of a new, checked address,
// and a hop to any scheme but http or https is refused.
func (g *Guard) Client(o ClientOptions) *http.Client {
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	max := o.MaxRedirects
	if max == 0 {
		max = 10
	}
	return &http.Client{
		Transport: g.Transport(o.TLS),
		Timeout:   o.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if max < 0 {
				return http.ErrUseLastResponse
			}
			if len(via) > max {
				return fmt.Errorf("egress: stopped after %d redirects", max)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return g.refuse(&Refusal{Target: req.URL.Host, Reason: fmt.Sprintf("redirect to scheme %q (only http and https)", req.URL.Scheme)})
			}
			return nil
		},
	}
}

// AsRefusal returns the refusal inside err, if any.
func AsRefusal(err error) (*Refusal, bool) {
	var r *Refusal
	if errors.As(err, &r) {
		return r, true
	}
	return nil, false
}
