package fleet

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// transport says whether an agent's connection was encrypted end to end as
// far as the panel can tell, and describes it for the log:
//   - TLS terminated by the panel itself: secure;
//   - from a trusted proxy (--trusted-proxies): secure only if the proxy says
//     the agent's leg was https (the last X-Forwarded-Proto entry, the one the
//     proxy beside the panel wrote);
//   - from loopback with no forwarding header: a local agent, secure;
//   - anything else (a remote peer on cleartext, or a loopback peer that
//     forwards for someone but is not a trusted proxy): not secure.
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
	if peer.IsLoopback() {
		if forwarded {
			return false, "cleartext from a loopback proxy that is not in --trusted-proxies"
		}
		return true, "loopback"
	}
	return false, "cleartext from " + peer.String()
}

// lastListEntry is the last comma-separated entry of a header's values.
func lastListEntry(vals []string) string {
	if len(vals) == 0 {
		return ""
	}
	parts := strings.Split(vals[len(vals)-1], ",")
	return strings.TrimSpace(parts[len(parts)-1])
}
