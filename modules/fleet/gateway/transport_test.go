package gateway

import (
	"crypto/tls"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTransportSecurity(t *testing.T) {
	caddy := []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}
	for _, c := range []struct {
		name    string
		remote  string
		tls     bool
		headers map[string]string
		trusted []netip.Prefix
		secure  bool
	}{
		{"remote cleartext", "203.0.113.5:4000", false, nil, nil, false},
		{"remote cleartext claiming https", "203.0.113.5:4000", false, map[string]string{"X-Forwarded-Proto": "https"}, nil, false},
		{"remote over the panel's own TLS", "203.0.113.5:4000", true, nil, nil, true},
		{"local agent on loopback", "127.0.0.1:4000", false, nil, nil, true},
		{"local agent on ::1", "[::1]:4000", false, nil, nil, true},
		{"loopback proxy not trusted", "127.0.0.1:4000", false, map[string]string{"X-Forwarded-For": "203.0.113.5"}, nil, false},
		{"trusted proxy, agent on https", "10.0.0.2:4000", false, map[string]string{"X-Forwarded-Proto": "https"}, caddy, true},
		{"trusted proxy, agent on http", "10.0.0.2:4000", false, map[string]string{"X-Forwarded-Proto": "http"}, caddy, false},
		{"trusted proxy, spoofed chain", "10.0.0.2:4000", false, map[string]string{"X-Forwarded-Proto": "https, http"}, caddy, false},
		{"trusted proxy, silent", "10.0.0.2:4000", false, map[string]string{"X-Forwarded-For": "203.0.113.5"}, caddy, false},
		{"trusted proxy peer, no proxying, remote", "10.0.0.2:4000", false, nil, caddy, false},
		{"local agent while loopback is a trusted proxy", "127.0.0.1:4000", false, nil, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, true},
		{"loopback trusted proxy forwarding http", "127.0.0.1:4000", false, map[string]string{"X-Forwarded-For": "203.0.113.5", "X-Forwarded-Proto": "http"}, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, false},
		{"untrusted private peer", "10.0.0.3:4000", false, map[string]string{"X-Forwarded-Proto": "https"}, caddy, false},
	} {
		r := httptest.NewRequest("GET", "/agent/ws", nil)
		r.RemoteAddr = c.remote
		if c.tls {
			r.TLS = &tls.ConnectionState{}
		}
		for k, v := range c.headers {
			r.Header.Set(k, v)
		}
		got, how := transport(r, c.trusted)
		require.Equal(t, c.secure, got, "%s (%s)", c.name, how)
		require.NotEmpty(t, how)
	}
}
