package config

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPrefixes(t *testing.T) {
	got, err := Prefixes(" 127.0.0.1, ::1 ,10.1.2.3/8,")
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("10.0.0.0/8")}, got)
	none, err := Prefixes("")
	require.NoError(t, err)
	require.Empty(t, none)
	for _, bad := range []string{"caddy", "10.0.0.0/33", "1.2.3"} {
		_, err := Prefixes(bad)
		require.ErrorContains(t, err, bad)
	}
}
