package config

import (
	"fmt"
	"net/netip"
	"strings"
)

// Prefixes parses a comma-separated list of IP addresses and CIDR prefixes
// ("127.0.0.1, ::1, 10.0.0.0/8"), as --trusted-proxies takes them. An empty
// string is an empty list.
func Prefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, fmt.Errorf("config: %q is not an address or CIDR prefix (10.0.0.0/8, ::1)", f)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("config: %q is not an address or CIDR prefix (10.0.0.0/8, ::1)", f)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
