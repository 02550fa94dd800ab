package server

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestForwardedAddressIsTrustedOnlyFromConfiguredProxies(t *testing.T) {
	none, err := ParseTrustedProxies("")
	require.NoError(t, err)
	caddy, err := ParseTrustedProxies("127.0.0.1, ::1")
	require.NoError(t, err)
	lb, err := ParseTrustedProxies("10.0.0.0/8")
	require.NoError(t, err)
	_, err = ParseTrustedProxies("10.0.0.0/8, localhost")
	require.ErrorContains(t, err, `"localhost"`)

	for _, c := range []struct {
		name        string
		trusted     any
		remote, xri string
		xff         []string
		proto       string
		wantIP      string
		wantHTTPS   bool
	}{
		// The probe: a local process (or anything on loopback) sent
		// X-Real-IP and was believed. With no trusted proxy, never.
		{"loopback peer, no trusted proxies", none, "127.0.0.1:41000", "203.0.113.9", nil, "https", "127.0.0.1", false},
		{"loopback peer, xff, no trusted proxies", none, "[::1]:41000", "", []string{"203.0.113.9"}, "", "::1", false},
		{"remote peer claims", caddy, "198.51.100.4:5000", "203.0.113.9", []string{"203.0.113.10"}, "https", "198.51.100.4", false},
		{"Caddy on loopback", caddy, "127.0.0.1:41000", "203.0.113.9", nil, "https", "203.0.113.9", true},
		{"Caddy, xff only", caddy, "127.0.0.1:41000", "", []string{"198.51.100.1, 203.0.113.9"}, "", "203.0.113.9", false},
		{"load balancer chain", lb, "10.0.0.2:41000", "", []string{"203.0.113.9, 10.0.0.7", "10.0.0.8"}, "", "203.0.113.9", false},
		{"spoofed leftmost entry ignored", lb, "10.0.0.2:41000", "", []string{"1.2.3.4, 203.0.113.9"}, "", "203.0.113.9", false},
		{"garbage header", caddy, "127.0.0.1:41000", "not-an-ip", []string{"also not"}, "", "127.0.0.1", false},
		{"mapped v4 peer", caddy, "[::ffff:127.0.0.1]:41000", "203.0.113.9", nil, "", "203.0.113.9", false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.remote
		if c.xri != "" {
			r.Header.Set("X-Real-IP", c.xri)
		}
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if c.proto != "" {
			r.Header.Set("X-Forwarded-Proto", c.proto)
		}
		var ip string
		var https bool
		RealIP(c.trusted.([]netip.Prefix))(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			ip, https = ClientIP(r), ForwardedHTTPS(r)
		})).ServeHTTP(httptest.NewRecorder(), r)
		require.Equal(t, c.wantIP, ip, c.name)
		require.Equal(t, c.wantHTTPS, https, c.name)
	}
	// Without the middleware, the peer's address without its port.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "198.51.100.4:5000"
	require.Equal(t, "198.51.100.4", ClientIP(r))
}
