package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ParseTrustedProxies parses a comma-separated list of proxy addresses or
// CIDR prefixes ("127.0.0.1, ::1, 10.0.0.0/8"). Empty means none.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("server: trusted proxy %q is neither an address nor a CIDR prefix (e.g. 127.0.0.1 or 10.0.0.0/8)", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

type peerKey struct{}

// peer is what RealIP learnt about a request.
type peer struct {
	ip    string
	https bool
}

// RealIP returns middleware that settles the client's address once per
// request. The peer's own address counts, except when the peer is one of the
// trusted proxies: then its X-Real-IP, or else the rightmost entry of
// X-Forwarded-For that is not itself a trusted proxy, is the client, and its
// X-Forwarded-Proto says whether the client used HTTPS. Nobody else's
// headers are believed, loopback peers included (any local process can
// connect from loopback). With no trusted proxies, headers are ignored.
func RealIP(trusted []netip.Prefix) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := peer{ip: hostOf(r.RemoteAddr)}
			if isTrusted(trusted, p.ip) {
				if x := strings.TrimSpace(r.Header.Get("X-Real-IP")); validIP(x) {
					p.ip = canonical(x)
				} else if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
					parts := strings.Split(strings.Join(xff, ","), ",")
					for i := len(parts) - 1; i >= 0; i-- {
						x := strings.TrimSpace(parts[i])
						if !validIP(x) {
							break
						}
						p.ip = canonical(x)
						if !isTrusted(trusted, p.ip) {
							break
						}
					}
				}
				p.https = strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), peerKey{}, p)))
		})
	}
}

// ClientIP returns the client's address (no port): what RealIP settled, or
// the peer's address when RealIP did not run.
func ClientIP(r *http.Request) string {
	if p, ok := r.Context().Value(peerKey{}).(peer); ok {
		return p.ip
	}
	return hostOf(r.RemoteAddr)
}

// ForwardedHTTPS reports whether a trusted proxy said the client reached it
// over HTTPS.
func ForwardedHTTPS(r *http.Request) bool {
	p, ok := r.Context().Value(peerKey{}).(peer)
	return ok && p.https
}

func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return canonical(h)
	}
	return canonical(hostport)
}

func canonical(ip string) string {
	if a, err := netip.ParseAddr(ip); err == nil {
		return a.Unmap().String()
	}
	return ip
}

func validIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return s != "" && err == nil
}

func isTrusted(trusted []netip.Prefix, ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
