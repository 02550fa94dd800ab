package egress_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/egress"
)

// TestAllowlistEntriesOpenTheirOwnPortsOnly: an entry with a port opens
// that port of its range and no other (the demo's loopback catalogue no
// longer opens every loopback service on 80 and 443); one without a port
// opens 80 and 443; public addresses keep the policy's ports.
func TestAllowlistEntriesOpenTheirOwnPortsOnly(t *testing.T) {
	ents, err := egress.ParseEntries([]string{"127.0.0.0/8:8081", "10.1.0.0/16", "[::1]:9000", "[fd00::/8]:8443", "192.168.1.5:5432"})
	require.NoError(t, err)
	p := egress.Policy{Entries: ents, Ports: []int{80, 443, 8080}}
	for _, c := range []struct {
		addr string
		port int
		ok   bool
	}{
		{"127.0.0.1", 8081, true},
		{"127.9.9.9", 8081, true},
		{"127.0.0.1", 80, false},
		{"127.0.0.1", 443, false},
		{"127.0.0.1", 8080, false}, // a policy port opens public addresses, not the entry's range
		{"127.0.0.1", 5432, false},
		{"::ffff:127.0.0.1", 8081, true},
		{"10.1.2.3", 443, true},
		{"10.1.2.3", 80, true},
		{"10.1.2.3", 8081, false},
		{"10.2.0.1", 443, false},
		{"::1", 9000, true},
		{"::1", 443, false},
		{"fd00::1", 8443, true},
		{"192.168.1.5", 5432, true},
		{"192.168.1.6", 5432, false},
		{"93.184.216.34", 443, true},
		{"93.184.216.34", 8080, true},
		{"93.184.216.34", 8081, false},
	} {
		err := p.CheckAddr(c.addr, netip.MustParseAddr(c.addr), c.port)
		if c.ok {
			require.NoError(t, err, "%s:%d", c.addr, c.port)
		} else {
			require.Error(t, err, "%s:%d", c.addr, c.port)
		}
	}
	err = p.CheckAddr("127.0.0.1:80", netip.MustParseAddr("127.0.0.1"), 80)
	require.ErrorContains(t, err, "its allowlist entries open port 8081 only", "the refusal says which ports the entry opens")

	for _, bad := range []string{"127.0.0.0/8:", "127.0.0.0/8:http", "127.0.0.0/8:70000", "[::1", "[::1]8080", "nonsense:80"} {
		_, err := egress.ParseEntries([]string{bad})
		require.Error(t, err, bad)
	}
	for _, c := range []struct {
		prefix string
		port   int
		want   string
	}{{"127.0.0.0/8", 8081, "127.0.0.0/8:8081"}, {"127.0.0.1/32", 80, "127.0.0.1:80"}, {"::1/128", 9000, "[::1]:9000"},
		{"fd00::/8", 0, "fd00::/8"}, {"fd00::/8", 8443, "[fd00::/8]:8443"}} {
		got := egress.FormatEntry(netip.MustParsePrefix(c.prefix), c.port)
		require.Equal(t, c.want, got)
		back, err := egress.ParseEntries([]string{got})
		require.NoError(t, err, got)
		require.Equal(t, netip.MustParsePrefix(c.prefix), back[0].Prefix)
	}
}
