package gateway

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// transport says whether an agent's connection was encrypted end to end as
// far as the panel can tell, and describes it for the log:
//   - TLS terminated by the panel itself: secure;
//   - with no forwarding header, the peer is the agent: secure only on
//     loopback (a local agent, also when loopback is a trusted proxy);
//   - forwarded by a trusted proxy (--trusted-proxies): secure only if the
//     proxy says the agent's leg was https (the last X-Forwarded-Proto
//     entry, the one the proxy beside the panel wrote);
//   - forwarded by anyone else, loopback included: not secure.
func transport(r *http.Request, trusted []netip.Prefix) (secure bool, how string) {
	if r.TLS != nil {
		return true, "tls"
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return false, "cleartext from an unparsable peer address"
	}
	peer = peer.Unmap()
	forwarded := r.Header.Get("X-Forwarded-For") != "" || r.Header.Get("X-Forwarded-Proto") != "" ||
		r.Header.Get("Forwarded") != "" || r.Header.Get("X-Real-IP") != ""
	if !forwarded {
		// Nobody in between: the peer is the agent itself.
		if peer.IsLoopback() {
			return true, "loopback"
		}
		return false, "cleartext from " + peer.String()
	}
	for _, p := range trusted {
		if p.Contains(peer) {
			proto := lastListEntry(r.Header.Values("X-Forwarded-Proto"))
			if strings.EqualFold(proto, "https") || strings.EqualFold(proto, "wss") {
				return true, "https via trusted proxy " + peer.String()
			}
			if proto == "" {
				return false, "trusted proxy " + peer.String() + " sent no X-Forwarded-Proto"
			}
			return false, proto + " via trusted proxy " + peer.String()
		}
	}
	return false, "cleartext from " + peer.String() + ", a proxy that is not in --trusted-proxies"
}

// lastListEntry is the last comma-separated entry of a header's values.
func lastListEntry(vals []string) string {
	if len(vals) == 0 {
		return ""
	}
	parts := strings.Split(vals[len(vals)-1], ",")
	return strings.TrimSpace(parts[len(parts)-1])
}
