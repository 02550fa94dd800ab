package panel_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/auth"
)

// TestPlatformIdempotencySettingIsAdminOnly: the claim settings page shows
// whether each platform honours idempotency keys (default not); an operator
// cannot change it, an admin can, audited in the tenant's chain; bad input
// is refused with 422 and changes nothing.
func TestPlatformIdempotencySettingIsAdminOnly(t *testing.T) {
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

	res, body := do(t, oc, "GET", base+"/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="platform-sandbox"`)
	require.Contains(t, body, "not honoured")
	require.NotContains(t, body, `data-testid="keys-on-sandbox"`, "an operator gets no form")
	res, _ = do(t, oc, "POST", base+"/platforms", url.Values{"platform": {"sandbox"}, "honours": {"true"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	on, err := c.claims.Store().HonoursIdempotency(ctx, alpha.ID)
	require.NoError(t, err)
	require.False(t, on)

	res, body = do(t, ac, "GET", base+"/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="keys-on-sandbox"`)
	res, body = do(t, ac, "POST", base+"/platforms", url.Values{"platform": {"sandbox"}, "honours": {"maybe"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, c.logs.String())
	require.Contains(t, body, `data-testid="error-platforms"`)
	require.Empty(t, c.audited(t, alpha.ID, "claim.platform.idempotency"))

	res, _ = do(t, ac, "POST", base+"/platforms", url.Values{"platform": {"sandbox"}, "honours": {"true"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	on, err = c.claims.Store().HonoursIdempotency(ctx, alpha.ID)
	require.NoError(t, err)
	require.True(t, on)
	a := c.audited(t, alpha.ID, "claim.platform.idempotency")
	require.Len(t, a, 1)
	require.Equal(t, "admin@fleet.test", a[0].Actor)
	_, body = do(t, oc, "GET", base+"/settings", nil)
	require.Contains(t, body, `data-testid="keys-state">honoured`)
	require.Contains(t, body, "admin@fleet.test")
}
