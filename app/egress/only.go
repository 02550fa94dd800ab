package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// OnlyTargets turns origins (scheme://host[:port]) into Policy.Only
// targets: host:port, the scheme's default port filled in. An origin that
// is no http(s) URL with a host is an error.
func OnlyTargets(origins []string) ([]string, error) {
	var out []string
	for _, o := range origins {
		u, err := url.Parse(strings.TrimSpace(o))
		if err != nil || u.Hostname() == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("egress: %q is not an origin (scheme://host[:port])", o)
		}
		port := u.Port()
		if port == "" {
			port = "80"
			if u.Scheme == "https" {
				port = "443"
			}
		}
		out = append(out, net.JoinHostPort(u.Hostname(), port))
	}
	return out, nil
}

// sameTarget compares a dialled host and port with an Only entry the way
// a browser would read both: names case-insensitively without a trailing
// dot, IP literals as addresses (127.1 is 127.0.0.1).
func sameTarget(host string, port int, entry string) bool {
	eh, ep, err := net.SplitHostPort(entry)
	if err != nil {
		return false
	}
	if n, err := strconv.Atoi(ep); err != nil || n != port {
		return false
	}
	a, aok, aerr := ParseHost(host)
	b, bok, berr := ParseHost(eh)
	if aerr != nil || berr != nil {
		return false
	}
	if aok || bok {
		return aok && bok && a.Unmap() == b.Unmap()
	}
	norm := func(s string) string { return strings.TrimSuffix(strings.ToLower(s), ".") }
	return norm(host) == norm(eh)
}

// checkOnly admits a target named in Policy.Only, on the addresses it
// resolves to, and refuses every other one before any DNS query.
func (g *Guard) checkOnly(ctx context.Context, network, target, host string, port int) ([]netip.AddrPort, error) {
	if !slices.ContainsFunc(g.policy.Only, func(e string) bool { return sameTarget(host, port, e) }) {
		return nil, g.refuse(&Refusal{Target: target,
			Reason: "not the platform's origin (allowed: " + strings.Join(g.policy.Only, ", ") + ")"})
	}
	if a, ok, _ := ParseHost(host); ok {
		if a.Zone() != "" {
			return nil, g.refuse(&Refusal{Target: target, Addr: a, Reason: fmt.Sprintf("scoped address (zone %q)", a.Zone())})
		}
		return []netip.AddrPort{netip.AddrPortFrom(a, uint16(port))}, nil
	}
	rnet := "ip"
	switch network {
	case "tcp4":
		rnet = "ip4"
	case "tcp6":
		rnet = "ip6"
	}
	addrs, err := g.resolver.LookupNetIP(ctx, rnet, host)
	if err != nil {
		return nil, g.refuse(&Refusal{Target: target, Reason: "name does not resolve: " + err.Error()})
	}
	var out []netip.AddrPort
	for _, a := range addrs {
		if a.Zone() == "" {
			out = append(out, netip.AddrPortFrom(a, uint16(port)))
		}
	}
	if len(out) == 0 {
		return nil, g.refuse(&Refusal{Target: target, Reason: "name resolves to no address"})
	}
	return out, nil
}
