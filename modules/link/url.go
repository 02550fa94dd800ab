package link

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// WebSocketURL derives the agent endpoint from the panel's base URL:
// http(s)://host[:port][/prefix] gets /agent/ws appended; a ws(s):// URL is
// taken as the endpoint itself (/agent/ws is appended only when missing).
// The token travels in hello (and an agent's credentials in welcome), so a
// cleartext scheme (http, ws) is refused unless the host is this machine.
func WebSocketURL(panel string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(panel))
	if err != nil {
		return "", fmt.Errorf("--panel %q is not a URL: %v", panel, err)
	}
	shown, scheme := u.Redacted(), u.Scheme
	endpoint := false
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	case "ws", "wss":
		endpoint = true
	default:
		return "", fmt.Errorf("--panel must be an https:// or wss:// URL (http:// or ws:// only on loopback), got %q", panel)
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("--panel %q has no host", panel)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("--panel must be a base URL without user, query or fragment")
	}
	if u.Scheme == "ws" && !IsLoopbackHost(u.Hostname()) {
		return "", fmt.Errorf("--panel %s is cleartext (%s://) to %s, which is not this machine: the token and everything the panel sends back (an agent's account credentials) would cross the network readable; use https:// or wss:// (cleartext is accepted only on loopback)",
			shown, scheme, u.Hostname())
	}
	path := strings.TrimRight(u.Path, "/")
	if !endpoint || !strings.HasSuffix(path, "/agent/ws") {
		path += "/agent/ws"
	}
	u.Path, u.RawPath = path, ""
	return u.String(), nil
}

// IsLoopbackHost reports whether host (a name or an address, without port)
// can only mean this machine: "localhost" and its subdomains, 127.0.0.0/8 and ::1.
func IsLoopbackHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}
