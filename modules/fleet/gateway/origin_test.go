package gateway_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/fleet/gateway"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestWelcomeNamesTheCredentialsOrigin: to a v5 agent the welcome names the
// origin the sealed credentials belong to (the agent sends them nowhere
// else); a v4 agent's welcome is as it was, without the field.
func TestWelcomeNamesTheCredentialsOrigin(t *testing.T) {
	b := setup(t)
	url := b.gateway(t, gateway.Config{})
	id, token := b.agent(t, "acct-o")
	key, pub := newKey(t)
	w, raw := helloAs(t, url, wire.Hello{Token: wire.NewSecret(token), InstallKey: pub}, wire.V5, nil)
	require.NotNil(t, w.SealedCredentials)
	c, err := w.SealedCredentials.Open(key, id)
	require.NoError(t, err)
	require.Equal(t, "user-acct-o", c.Username)
	require.Equal(t, []string{"http://127.0.0.1:1"}, w.CredentialOrigins)
	require.Contains(t, raw, `"credential_origins":["http://127.0.0.1:1"]`)

	w, raw = helloAs(t, url, wire.Hello{Token: wire.NewSecret(token), InstallKey: pub}, wire.V4, nil)
	require.Equal(t, wire.V4, w.Version)
	require.NotNil(t, w.SealedCredentials, "a v4 agent still gets its credentials")
	require.Empty(t, w.CredentialOrigins)
	require.NotContains(t, raw, "credential_origins")
}
