package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestDispatchModeIsAdminOnly: a new tenant dispatches in assign mode
// (migration 0140), and its tenant.created entry says so; the claim settings
// page shows the mode; an operator cannot change it, an admin can, audited
// in the tenant's chain with the value before; bad input is refused with 422
// and changes nothing.
func TestDispatchModeIsAdminOnly(t *testing.T) {
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
	mode := func() string {
		m, err := c.Claims.Store().DispatchMode(ctx, alpha.ID)
		require.NoError(t, err)
		return m
	}

	require.Equal(t, claim.DispatchAssign, mode(), "a new tenant dispatches in assign mode")
	created := c.Audited(t, alpha.ID, "tenant.created")
	require.Len(t, created, 1)
	require.Contains(t, created[0].Detail, `"dispatch_mode": "assign"`, "the tenant's first entry records its mode")

	res, body := paneltest.Do(t, oc, "GET", base+"/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="dispatch-mode">assign`)
	require.NotContains(t, body, `data-testid="dispatch-old-agents"`)
	// A connected agent on protocol v3 cannot be granted jobs: the page says
	// it only gets offers while no v4 actor is warm.
	agent := c.Agent(t, alpha)
	require.NoError(t, db.InTenant(ctx, c.DB.App, alpha.ID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE agents SET connected = true, protocol = 3 WHERE id = $1`, agent)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("%d agents updated", tag.RowsAffected())
		}
		return err
	}))
	_, body = paneltest.Do(t, oc, "GET", base+"/settings", nil)
	require.Contains(t, body, `data-testid="dispatch-old-agents">1 connected agent(s) speak a protocol older than 4`)
	require.NotContains(t, body, `data-testid="dispatch-race"`, "an operator gets no form")
	res, _ = paneltest.Do(t, oc, "POST", base+"/dispatch", url.Values{"mode": {"race"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.Equal(t, claim.DispatchAssign, mode())

	res, body = paneltest.Do(t, ac, "GET", base+"/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="dispatch-race"`)
	res, body = paneltest.Do(t, ac, "POST", base+"/dispatch", url.Values{"mode": {"fastest"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, c.Logs.String())
	require.Contains(t, body, `data-testid="error-dispatch"`)
	require.Empty(t, c.Audited(t, alpha.ID, "claim.dispatch_mode"))
	require.Equal(t, claim.DispatchAssign, mode())

	res, body = paneltest.Do(t, ac, "POST", base+"/dispatch", url.Values{"mode": {"race"}})
	require.Equal(t, http.StatusOK, res.StatusCode, "the server asks first")
	require.Equal(t, "Switch Alpha Freight to race mode?", paneltest.TestIDText(t, body, "confirm-question"))
	require.Equal(t, claim.DispatchAssign, mode())
	res, _ = paneltest.Do(t, ac, "POST", base+"/dispatch", url.Values{"mode": {"race"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, claim.DispatchRace, mode())
	a := c.Audited(t, alpha.ID, "claim.dispatch_mode")
	require.Len(t, a, 1)
	require.Equal(t, "admin@fleet.test", a[0].Actor)
	require.Contains(t, a[0].Detail, `"before": "assign"`)
	_, body = paneltest.Do(t, oc, "GET", base+"/settings", nil)
	require.Contains(t, body, `data-testid="dispatch-mode">race`)
	require.NotContains(t, body, `data-testid="dispatch-old-agents"`, "in race mode every agent gets offers")
	require.Contains(t, body, "admin@fleet.test")
}
