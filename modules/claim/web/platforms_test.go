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

// TestPlatformIdempotencySettingIsAdminOnly: the claim settings page shows
// whether each platform honours idempotency keys (default not); an operator
// cannot change it, an admin can, audited in the tenant's chain; bad input
// is refused with 422 and changes nothing.
func TestPlatformIdempotencySettingIsAdminOnly(t *testing.T) {
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
	require.Contains(t, body, `data-testid="platform-sandbox"`)
	require.Contains(t, body, "not honoured")
	require.NotContains(t, body, `data-testid="keys-on-sandbox"`, "an operator gets no form")
	res, _ = paneltest.Do(t, oc, "POST", base+"/platforms", url.Values{"platform": {"sandbox"}, "honours": {"true"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	on, err := c.Claims.Store().HonoursIdempotency(ctx, alpha.ID)
	require.NoError(t, err)
	require.False(t, on)

	res, body = paneltest.Do(t, ac, "GET", base+"/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="keys-on-sandbox"`)
	res, body = paneltest.Do(t, ac, "POST", base+"/platforms", url.Values{"platform": {"sandbox"}, "honours": {"maybe"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, c.Logs.String())
	require.Contains(t, body, `data-testid="error-platforms"`)
	require.Empty(t, c.Audited(t, alpha.ID, "claim.platform.idempotency"))

	res, _ = paneltest.Do(t, ac, "POST", base+"/platforms", url.Values{"platform": {"sandbox"}, "honours": {"true"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	on, err = c.Claims.Store().HonoursIdempotency(ctx, alpha.ID)
	require.NoError(t, err)
	require.True(t, on)
	a := c.Audited(t, alpha.ID, "claim.platform.idempotency")
	require.Len(t, a, 1)
	require.Equal(t, "admin@fleet.test", a[0].Actor)
	_, body = paneltest.Do(t, oc, "GET", base+"/settings", nil)
	require.Contains(t, body, `data-testid="keys-state">honoured`)
	require.Contains(t, body, "admin@fleet.test")
}
