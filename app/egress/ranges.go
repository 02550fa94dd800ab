package egress

import (
	"fmt"
	"net/netip"
)

// special is one entry of the IANA special-purpose address registries
// (iana-ipv4-special-registry, iana-ipv6-special-registry) plus the few
// ranges outside them that no data-driven fetch may reach (multicast,
// the reserved class E, the deprecated site-local IPv6 block).
type special struct {
	prefix netip.Prefix
	name   string
}

func mustPrefixes(rows [][2]string) []special {
	out := make([]special, len(rows))
	for i, r := range rows {
		out[i] = special{netip.MustParsePrefix(r[0]), r[1]}
	}
	return out
}

// specialV4 is denied whatever the registry says about global
// reachability: 192.0.0.9/32 and 192.0.0.10/32 are "globally reachable"
// anycast services no crawler has a reason to visit.
var specialV4 = mustPrefixes([][2]string{
	{"0.0.0.0/8", "this network (RFC 791)"},
	{"10.0.0.0/8", "private use (RFC 1918)"},
	{"100.64.0.0/10", "shared address space / CGNAT (RFC 6598)"},
	{"127.0.0.0/8", "loopback (RFC 1122)"},
	{"169.254.0.0/16", "link-local, cloud metadata (RFC 3927)"},
	{"172.16.0.0/12", "private use (RFC 1918)"},
	{"192.0.0.0/24", "IETF protocol assignments (RFC 6890)"},
	{"192.0.2.0/24", "documentation TEST-NET-1 (RFC 5737)"},
	{"192.31.196.0/24", "AS112-v4 (RFC 7535)"},
	{"192.52.193.0/24", "AMT (RFC 7450)"},
	{"192.88.99.0/24", "deprecated 6to4 relay anycast (RFC 7526)"},
	{"192.168.0.0/16", "private use (RFC 1918)"},
	{"192.175.48.0/24", "direct delegation AS112 service (RFC 7534)"},
	{"198.18.0.0/15", "benchmarking (RFC 2544)"},
	{"198.51.100.0/24", "documentation TEST-NET-2 (RFC 5737)"},
	{"203.0.113.0/24", "documentation TEST-NET-3 (RFC 5737)"},
	{"224.0.0.0/4", "multicast (RFC 5771)"},
	{"240.0.0.0/4", "reserved, limited broadcast (RFC 1112, RFC 919)"},
})

// specialV6 excludes ::ffff:0:0/96 (IPv4-mapped), 64:ff9b::/96 (NAT64)
// and 2002::/16 (6to4): those carry an IPv4 address that is checked
// against specialV4 instead (translate below).
var specialV6 = mustPrefixes([][2]string{
	{"::/128", "unspecified address (RFC 4291)"},
	{"::1/128", "loopback (RFC 4291)"},
	{"::/96", "IPv4-compatible, deprecated (RFC 4291)"},
	{"64:ff9b:1::/48", "local-use IPv4/IPv6 translation (RFC 8215)"},
	{"100::/64", "discard-only (RFC 6666)"},
	{"100:0:0:1::/64", "dummy IPv6 prefix (RFC 9780)"},
	{"2001::/23", "IETF protocol assignments incl. Teredo (RFC 2928, RFC 4380)"},
	{"2001:db8::/32", "documentation (RFC 3849)"},
	{"3fff::/20", "documentation (RFC 9637)"},
	{"5f00::/16", "segment routing SIDs (RFC 9602)"},
	{"fc00::/7", "unique local, incl. cloud metadata fd00:ec2::254 (RFC 4193)"},
	{"fe80::/10", "link-local unicast (RFC 4291)"},
	{"fec0::/10", "site-local, deprecated (RFC 3879)"},
	{"ff00::/8", "multicast (RFC 4291)"},
	{"::/8", "reserved by IETF (RFC 4291)"},
})

var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4  = netip.MustParsePrefix("2002::/16")
	mapped4 = netip.MustParsePrefix("::ffff:0:0/96")
)

// Classify says why an address is special-purpose, or "" when it is an
// ordinary global unicast address. IPv4-mapped, NAT64-translated and 6to4
// IPv6 addresses are judged by the IPv4 address they carry.
func Classify(a netip.Addr) string {
	if !a.IsValid() {
		return "not an address"
	}
	if a.Zone() != "" {
		return fmt.Sprintf("scoped address (zone %q)", a.Zone())
	}
	if a.Is4In6() {
		if r := classify4(a.Unmap()); r != "" {
			return "IPv4-mapped " + r
		}
		return ""
	}
	if a.Is4() {
		return classify4(a)
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		if r := classify4(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})); r != "" {
			return "NAT64-translated " + r
		}
		return ""
	case sixTo4.Contains(a):
		if r := classify4(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})); r != "" {
			return "6to4-embedded " + r
		}
		return ""
	}
	for _, s := range specialV6 {
		if s.prefix.Contains(a) {
			return s.name + " " + s.prefix.String()
		}
	}
	if !a.IsGlobalUnicast() {
		return "not global unicast"
	}
	return ""
}

func classify4(a netip.Addr) string {
	for _, s := range specialV4 {
		if s.prefix.Contains(a) {
			return s.name + " " + s.prefix.String()
		}
	}
	return ""
}
