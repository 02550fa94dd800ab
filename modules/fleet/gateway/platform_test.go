package gateway_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/platform/registry"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestWelcomeCarriesTheAccountsPlatformToV5Only: an account an admin moved
// to one of the tenant's platform versions has its spec in a v5 agent's
// welcome (name, version, digest, source); a v4 agent's welcome carries
// no trace of it, and an account on the built-in sandbox none at all.
func TestWelcomeCarriesTheAccountsPlatformToV5Only(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	url := b.gateway(t, gateway.Config{})
	_, token := b.agent(t, "acct-p")
	_, pub := newKey(t)
	hello := wire.Hello{Token: wire.NewSecret(token), InstallKey: pub}

	w, raw := helloAs(t, url, hello, wire.V5, nil)
	require.Nil(t, w.Config.Account.Platform, "the built-in sandbox travels as no spec")
	require.NotContains(t, raw, `"platform"`)

	src, err := os.ReadFile("../../../examples/platforms/sandbox.yaml")
	require.NoError(t, err)
	st := registry.New(b.db.App)
	v, _, err := st.Apply(ctx, b.tenant, ops, "acme.yaml", []byte(strings.Replace(string(src), "name: sandbox", "name: acme-board", 1)))
	require.NoError(t, err)
	a, err := st.AccountByKey(ctx, b.tenant, "acct-p")
	require.NoError(t, err)
	require.NoError(t, st.SetAccount(ctx, b.tenant, ops, a.ID, v.PlatformID, v.Version))

	w, raw = helloAs(t, url, hello, wire.V5, nil)
	require.Equal(t, &wire.PlatformSpec{Name: "acme-board", Version: 1, Digest: registry.Digest(v.Source), Source: v.Source}, w.Config.Account.Platform)
	require.Contains(t, raw, `"digest":"`+v.Digest+`"`)

	w, raw = helloAs(t, url, hello, wire.V4, nil)
	require.Equal(t, wire.V4, w.Version)
	require.Nil(t, w.Config.Account.Platform)
	require.NotContains(t, raw, `"platform"`, "a v4 agent sees no trace of it")
}
