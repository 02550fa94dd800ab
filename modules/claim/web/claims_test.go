package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

func tenantRow(t *testing.T, c *paneltest.Console, id string) tenant.Tenant {
	t.Helper()
	tn, err := tenant.ByID(context.Background(), c.Claims.Store().Pool(), id)
	require.NoError(t, err)
	return tn
}

// TestClaimPagesAreConsolePages: the claims, latency and claim settings
// pages of a tenant for its operator and viewer, each change audited in the
// tenant's chain, bad input refused with 422 and nothing changed, a viewer
// refused every change, and a tenant pause reaching the tenant's agents.
func TestClaimPagesAreConsolePages(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	alpha := c.Tenant(t, "alpha")
	const pw = "correct horse battery"
	op, viewer := c.User(t, "op@fleet.test", auth.Operator, pw), c.User(t, "viewer@fleet.test", auth.Viewer, pw)
	c.Grant(t, op, alpha)
	c.Grant(t, viewer, alpha)
	oc, vc := paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, oc, "op@fleet.test", pw)
	c.Enrolled(t, vc, "viewer@fleet.test", pw)
	c.Claimed(t, alpha, "LD-100", "actor-7")
	agentID := c.Agent(t, alpha)
	base := c.Server.URL + "/t/alpha/claims"

	// The tenant's overview links to its claim pages.
	res, body := paneltest.Do(t, oc, "GET", c.Server.URL+"/t/alpha", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `href="/t/alpha/claims"`)
	require.Contains(t, body, `href="/t/alpha/claims/latency"`)

	res, body = paneltest.Do(t, oc, "GET", base, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="claim-LD-100"`)
	require.Contains(t, body, `hx-get="/t/alpha/claims/rows?`)
	require.Contains(t, body, `data-testid="sidebar"`, "the console's layout")
	require.Contains(t, body, "op@fleet.test")
	res, body = paneltest.Do(t, oc, "GET", base+"/rows?state=CONFIRMED", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "LD-100")
	_, body = paneltest.Do(t, oc, "GET", base+"/rows?state=UNKNOWN", nil)
	require.NotContains(t, body, "LD-100")

	res, body = paneltest.Do(t, vc, "GET", base+"/latency?window=1h&by=worker", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="latency-agent 00000000 · actor-7"`, "per worker names the agent too")
	require.Contains(t, body, `data-testid="hist-detect_action"`)
	require.Contains(t, body, `data-testid="series-detect_action"`)
	require.Contains(t, body, "platform clock not measured", "publish → detect says its sighting carried no reading of the board's clock")
	res, body = paneltest.Do(t, vc, "GET", base+"/latency.csv?window=1h", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.True(t, strings.HasPrefix(body, "job,state,cell,worker,token"))
	require.Contains(t, body, "LD-100,CONFIRMED,default,actor-7")

	// A viewer reads the settings but gets no form, and every change is 403.
	res, body = paneltest.Do(t, vc, "GET", base+"/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="filters"`)
	require.NotContains(t, body, `data-testid="pause-tenant"`)
	for _, p := range []string{"/pause", "/limits", "/filters", "/filters/delete", "/reviews"} {
		res, _ = paneltest.Do(t, vc, "POST", base+p, url.Values{"paused": {"true"}, "daily_booking_cap": {"1"}, "name": {"x"}, "id": {"1"}, "key": {"LD-100"}, "decision": {"approve"}})
		require.Equal(t, http.StatusForbidden, res.StatusCode, "viewer POST "+p)
	}
	require.False(t, tenantRow(t, c, alpha.ID).Paused)
	require.Nil(t, tenantRow(t, c, alpha.ID).DailyBookingCap)

	// Bad input: 422, the message beside the form, what was typed kept,
	// nothing changed.
	res, body = paneltest.Do(t, oc, "POST", base+"/limits", url.Values{"daily_booking_cap": {"lots"}, "review_above_usd": {"2500"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="error-limits"`)
	require.Contains(t, body, `value="lots"`)
	require.Nil(t, tenantRow(t, c, alpha.ID).DailyBookingCap)
	require.Empty(t, c.Audited(t, alpha.ID, "claim.limits"))
	res, _ = paneltest.Do(t, oc, "POST", base+"/limits", url.Values{"daily_booking_cap": {"40"}, "review_above_usd": {"2500"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	tn := tenantRow(t, c, alpha.ID)
	require.Equal(t, 40, *tn.DailyBookingCap)
	require.EqualValues(t, 250000, *tn.ReviewAboveCents)
	lim := c.Audited(t, alpha.ID, "claim.limits")
	require.Len(t, lim, 1)
	require.Equal(t, "op@fleet.test", lim[0].Actor)
	require.Contains(t, lim[0].Detail, `"daily_booking_cap": 40`)

	res, body = paneltest.Do(t, oc, "POST", base+"/filters", url.Values{"name": {""}, "origins": {"TX"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="error-filter-new"`)
	require.Contains(t, body, `value="TX"`)
	res, _ = paneltest.Do(t, oc, "POST", base+"/filters", url.Values{"name": {"TX reefers"}, "enabled": {"1"},
		"origins": {"TX; ok"}, "equipment": {"Reefer"}, "min_rate_per_mile_usd": {"2.75"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	fs, err := c.Claims.Store().Filters(ctx, alpha.ID)
	require.NoError(t, err)
	require.Len(t, fs, 2)
	require.Equal(t, []string{"tx", "ok"}, fs[1].Origins)
	require.Equal(t, 275, fs[1].MinRatePerMileCents)
	require.Len(t, c.Audited(t, alpha.ID, "claim.filter.put"), 2) // the test's own, then the operator's
	require.Equal(t, "op@fleet.test", c.Audited(t, alpha.ID, "claim.filter.put")[0].Actor)

	// Review: a load above the threshold waits; the operator approves it.
	c.Job(t, alpha, "LD-BIG", 400000)
	h := claim.Holder{Agent: "00000000-0000-4000-8000-0000000000a1", Worker: "actor-7"}
	lr := c.Claims.Lease(ctx, alpha.ID, h, wire.LeaseRequest{RequestID: "big", Worker: "actor-7", Key: "LD-BIG"})
	require.Equal(t, wire.ReasonReview, lr.Reason)
	_, body = paneltest.Do(t, oc, "GET", base+"/settings", nil)
	require.Contains(t, body, `data-testid="review-LD-BIG"`)
	res, _ = paneltest.Do(t, oc, "POST", base+"/reviews", url.Values{"key": {"LD-BIG"}, "decision": {"approve"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Len(t, c.Audited(t, alpha.ID, "claim.review.request"), 1)
	ap := c.Audited(t, alpha.ID, "claim.review.approve")
	require.Len(t, ap, 1)
	require.Equal(t, "op@fleet.test", ap[0].Actor)
	lr = c.Claims.Lease(ctx, alpha.ID, h, wire.LeaseRequest{RequestID: "big2", Worker: "actor-7", Key: "LD-BIG"})
	require.True(t, lr.Granted, lr.Reason)

	// Pause: audited in the tenant's chain, and the tenant's agent gets a
	// configure command whose configuration says paused.
	// Without its confirmation the server asks and changes nothing.
	res, ask := paneltest.Do(t, oc, "POST", base+"/pause", url.Values{"paused": {"true"}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "Pause the claims of Alpha Freight?", paneltest.TestIDText(t, ask, "confirm-question"))
	require.Contains(t, ask, `name="paused" value="true"`)
	require.Contains(t, ask, `name="confirm" value="yes"`)
	require.False(t, tenantRow(t, c, alpha.ID).Paused)
	require.Empty(t, c.Audited(t, alpha.ID, "claim.pause"))
	res, _ = paneltest.Do(t, oc, "POST", base+"/pause", url.Values{"paused": {"true"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.True(t, tenantRow(t, c, alpha.ID).Paused)
	_, page := paneltest.Do(t, oc, "GET", base+"/settings", nil)
	require.Regexp(t, `^Paused since \d\d:\d\d UTC by op@fleet.test$`, paneltest.TestIDText(t, page, "tenant-state"))
	pa := c.Audited(t, alpha.ID, "claim.pause")
	require.Len(t, pa, 1)
	require.Equal(t, "op@fleet.test", pa[0].Actor)
	require.Len(t, c.Audited(t, alpha.ID, "fleet.agents.configure"), 1)
	cmds, err := c.Fleet.Pending(ctx, alpha.ID, agentID)
	require.NoError(t, err)
	require.Len(t, cmds, 1)
	require.Equal(t, fleet.CmdConfigure, cmds[0].Kind)
	cfg, _, err := c.Fleet.Welcome(ctx, fleet.Agent{ID: agentID, Tenant: alpha.ID, AccountID: accountOf(t, c, alpha.ID, agentID)})
	require.NoError(t, err)
	require.True(t, cfg.Paused, "the configuration sent to the agent carries the pause")
	_, body = paneltest.Do(t, oc, "GET", base, nil)
	require.Contains(t, body, `data-testid="tenant-paused"`)
	res, _ = paneltest.Do(t, oc, "POST", base+"/pause", url.Values{"paused": {"false"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.False(t, tenantRow(t, c, alpha.ID).Paused)
	require.Len(t, c.Audited(t, alpha.ID, "claim.resume"), 1)
	cfg, _, err = c.Fleet.Welcome(ctx, fleet.Agent{ID: agentID, Tenant: alpha.ID, AccountID: accountOf(t, c, alpha.ID, agentID)})
	require.NoError(t, err)
	require.False(t, cfg.Paused)

	// The operator reaches no admin page.
	for _, p := range []string{"/admin/cells", "/admin/settings"} {
		res, _ = paneltest.Do(t, oc, "GET", c.Server.URL+p, nil)
		require.Equal(t, http.StatusForbidden, res.StatusCode, p)
	}
}

func accountOf(t *testing.T, c *paneltest.Console, tenantID, agentID string) string {
	var id string
	require.NoError(t, db.TenantRow(context.Background(), c.DB.App, tenantID, `SELECT account_id::text FROM agents WHERE id = $1`, agentID).Scan(&id))
	return id
}

// TestAdminCellsAndGlobalPause: the admin's cells page (routing read on the
// audited cross-tenant path), cell changes audited in the system chain (a
// tenant's move in its own chain too), and the global pause audited and sent
// to every tenant's agents.
func TestAdminCellsAndGlobalPause(t *testing.T) {
	c := paneltest.New(t)
	alpha, bravo := c.Tenant(t, "alpha"), c.Tenant(t, "bravo")
	const pw = "Quiet-Harbour-Lantern-42"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	ac := paneltest.Browserless()
	c.Enrolled(t, ac, "admin@fleet.test", pw)
	agentA, agentB := c.Agent(t, alpha), c.Agent(t, bravo)

	res, body := paneltest.Do(t, ac, "GET", c.Server.URL+"/admin/cells", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="cell-default"`)
	require.Contains(t, body, `data-testid="route-alpha"`)
	require.Contains(t, body, `data-testid="route-bravo"`)
	require.Contains(t, body, `href="/admin/cells"`, "the sidebar links the page")
	cross := c.Audited(t, audit.System, audit.CrossTenant)
	require.NotEmpty(t, cross)
	require.Equal(t, "admin@fleet.test", cross[0].Actor)
	require.Equal(t, "/admin/cells", cross[0].Target)

	res, body = paneltest.Do(t, ac, "POST", c.Server.URL+"/admin/cells", url.Values{"name": {"East 2"}, "redis_url": {"redis://:Sekret-Pass-9@127.0.0.1:6390/0"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="error-put"`)
	require.NotContains(t, body, "Sekret-Pass-9", "the Redis password is never echoed")
	require.Empty(t, c.Audited(t, audit.System, "cell.put"))
	res, _ = paneltest.Do(t, ac, "POST", c.Server.URL+"/admin/cells", url.Values{"name": {"east-2"}, "redis_url": {"redis://:Sekret-Pass-9@127.0.0.1:6390/0"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	put := c.Audited(t, audit.System, "cell.put")
	require.Len(t, put, 1)
	require.Equal(t, "east-2", put[0].Target)
	require.NotContains(t, put[0].Detail, "Sekret-Pass-9", "the audit keeps the URL without its password")
	_, body = paneltest.Do(t, ac, "GET", c.Server.URL+"/admin/cells", nil)
	require.Contains(t, body, `data-testid="cell-east-2"`)
	require.NotContains(t, body, "Sekret-Pass-9")

	res, ask := paneltest.Do(t, ac, "POST", c.Server.URL+"/admin/cells/route", url.Values{"tenant": {alpha.ID}, "cell": {"east-2"}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "Move Alpha Freight to cell east-2?", paneltest.TestIDText(t, ask, "confirm-question"))
	require.Equal(t, "default", tenantRow(t, c, alpha.ID).Cell)
	res, _ = paneltest.Do(t, ac, "POST", c.Server.URL+"/admin/cells/route", url.Values{"tenant": {alpha.ID}, "cell": {"east-2"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "east-2", tenantRow(t, c, alpha.ID).Cell)
	require.Len(t, c.Audited(t, audit.System, "cell.route"), 1)
	require.Len(t, c.Audited(t, alpha.ID, "cell.route"), 1, "the tenant's operators see the move in its chain")
	res, _ = paneltest.Do(t, ac, "POST", c.Server.URL+"/admin/cells/delete", url.Values{"name": {"east-2"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Empty(t, c.Audited(t, audit.System, "cell.delete"), "a cell in use is not deleted")
	paneltest.Do(t, ac, "POST", c.Server.URL+"/admin/cells/route", url.Values{"tenant": {alpha.ID}, "cell": {"default"}, "confirm": {"yes"}})
	res, _ = paneltest.Do(t, ac, "POST", c.Server.URL+"/admin/cells/delete", url.Values{"name": {"east-2"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Len(t, c.Audited(t, audit.System, "cell.delete"), 1)

	res, body = paneltest.Do(t, ac, "GET", c.Server.URL+"/admin/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="switch-alpha"`)
	require.Contains(t, body, `data-testid="pause-fleet"`)
	res, ask = paneltest.Do(t, ac, "POST", c.Server.URL+"/admin/settings/pause", url.Values{"paused": {"true"}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "Pause the whole fleet?", paneltest.TestIDText(t, ask, "confirm-question"))
	paused, err := c.Claims.Store().FleetPaused(context.Background())
	require.NoError(t, err)
	require.False(t, paused, "nothing is paused before the confirmation")
	res, _ = paneltest.Do(t, ac, "POST", c.Server.URL+"/admin/settings/pause", url.Values{"paused": {"true"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	_, page := paneltest.Do(t, ac, "GET", c.Server.URL+"/admin/settings", nil)
	require.Regexp(t, `^Paused since \d\d:\d\d UTC by admin@fleet.test$`, paneltest.TestIDText(t, page, "fleet-state"))
	paused, err = c.Claims.Store().FleetPaused(context.Background())
	require.NoError(t, err)
	require.True(t, paused)
	pa := c.Audited(t, audit.System, "claim.pause")
	require.Len(t, pa, 1)
	require.Equal(t, "admin@fleet.test", pa[0].Actor)
	for tn, agentID := range map[string]string{alpha.ID: agentA, bravo.ID: agentB} {
		cmds, err := c.Fleet.Pending(context.Background(), tn, agentID)
		require.NoError(t, err)
		require.Len(t, cmds, 1, "every tenant's agent is told")
		require.Equal(t, fleet.CmdConfigure, cmds[0].Kind)
		require.Len(t, c.Audited(t, tn, "fleet.agents.configure"), 1)
	}
	_, body = paneltest.Do(t, ac, "GET", c.Server.URL+"/t/bravo/claims", nil)
	require.Contains(t, body, `data-testid="fleet-paused"`)
	res, _ = paneltest.Do(t, ac, "POST", c.Server.URL+"/admin/settings/pause", url.Values{"paused": {"false"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Len(t, c.Audited(t, audit.System, "claim.resume"), 1)
}
