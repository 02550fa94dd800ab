package panel_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
)

// TestDispatchModeIsAdminOnly: the claim settings page shows the tenant's
// dispatch mode (default race); an operator cannot change it, an admin can,
// audited in the tenant's chain with the value before; bad input is refused
// with 422 and changes nothing.
func TestDispatchModeIsAdminOnly(t *testing.T) {
	c := newConsole(t)
	ctx := context.Background()
	alpha := c.tenant(t, "alpha")
	const pw = "Quiet-Harbour-Lantern-42"
	op := c.user(t, "op@fleet.test", auth.Operator, pw)
	c.grant(t, op, alpha)
	c.user(t, "admin@fleet.test", auth.Admin, pw)
	oc, ac := browserless(), browserless()
	c.enrolled(t, oc, "op@fleet.test", pw)
	c.enrolled(t, ac, "admin@fleet.test", pw)
	base := c.srv.URL + "/t/alpha/claims"
	mode := func() string {
		m, err := c.claims.Store().DispatchMode(ctx, alpha.ID)
		require.NoError(t, err)
		return m
	}

	res, body := do(t, oc, "GET", base+"/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="dispatch-mode">race`)
	require.NotContains(t, body, `data-testid="dispatch-assign"`, "an operator gets no form")
	res, _ = do(t, oc, "POST", base+"/dispatch", url.Values{"mode": {"assign"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.Equal(t, claim.DispatchRace, mode())

	res, body = do(t, ac, "GET", base+"/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="dispatch-assign"`)
	res, body = do(t, ac, "POST", base+"/dispatch", url.Values{"mode": {"fastest"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, c.logs.String())
	require.Contains(t, body, `data-testid="error-dispatch"`)
	require.Empty(t, c.audited(t, alpha.ID, "claim.dispatch_mode"))
	require.Equal(t, claim.DispatchRace, mode())

	res, _ = do(t, ac, "POST", base+"/dispatch", url.Values{"mode": {"assign"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, claim.DispatchAssign, mode())
	a := c.audited(t, alpha.ID, "claim.dispatch_mode")
	require.Len(t, a, 1)
	require.Equal(t, "admin@fleet.test", a[0].Actor)
	require.Contains(t, a[0].Detail, `"before": "race"`)
	_, body = do(t, oc, "GET", base+"/settings", nil)
	require.Contains(t, body, `data-testid="dispatch-mode">assign`)
	require.Contains(t, body, "admin@fleet.test")
}
