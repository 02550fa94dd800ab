package web_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestSingleNodeDurabilityIsAdminOnly: the settings page shows that the
// tenant requires two nodes (default) and the hold when there is one; an
// operator cannot change the setting, an admin can, audited in the tenant's
// chain; bad input is refused with 422 and changes nothing.
func TestSingleNodeDurabilityIsAdminOnly(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	alpha := c.Tenant(t, "alpha")
	const pw = "Quiet-Harbour-Lantern-42"
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, alpha)
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	oc, ac := paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, oc, "op@fleet.test", pw)
	c.Enrolled(t, ac, "admin@fleet.test", pw)
	base := c.Server.URL + "/t/alpha/claims"

	res, body := paneltest.Do(t, oc, "GET", base+"/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="single-node-state">two nodes required`)
	require.NotContains(t, body, `data-testid="durability-hold"`)
	require.NotContains(t, body, `data-testid="single-node-on"`, "an operator gets no form")
	res, _ = paneltest.Do(t, oc, "POST", base+"/durability", url.Values{"single_node_ok": {"true"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	res, body = paneltest.Do(t, ac, "POST", base+"/durability", url.Values{"single_node_ok": {"perhaps"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, c.Logs.String())
	require.Contains(t, body, `data-testid="error-durability"`)
	require.Empty(t, c.Audited(t, alpha.ID, "claim.single_node_ok"))

	res, _ = paneltest.Do(t, ac, "POST", base+"/durability", url.Values{"single_node_ok": {"true"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	d, err := c.Claims.Store().Durability(ctx, alpha.ID)
	require.NoError(t, err)
	require.True(t, d.SingleNodeOK)
	a := c.Audited(t, alpha.ID, "claim.single_node_ok")
	require.Len(t, a, 1)
	require.Equal(t, "admin@fleet.test", a[0].Actor)

	// A hold (as the durability check sets it) is shown to everyone.
	_, err = c.DB.Owner.Exec(ctx, `UPDATE fleet_switches SET durability_hold = 'no synchronous standby is streaming', durability_hold_since = now()`)
	require.NoError(t, err)
	_, body = paneltest.Do(t, oc, "GET", base+"/settings", nil)
	require.Contains(t, body, `data-testid="single-node-state">single-node accepted`)
	require.Contains(t, body, `data-testid="durability-hold"`)
	require.Contains(t, body, "no synchronous standby is streaming")
}
