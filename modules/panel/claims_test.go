package panel_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

var testBy = audit.Entry{Actor: "test"}

// claimed gives the tenant a filter that wants everything and runs one claim
// through lease, act and a confirmed outcome.
func (c *console) claimed(t *testing.T, tn tenant.Tenant, key, worker string) {
	t.Helper()
	ctx := context.Background()
	fs, err := c.claims.Store().Filters(ctx, tn.ID)
	require.NoError(t, err)
	if len(fs) == 0 {
		_, err := c.claims.PutFilter(ctx, testBy, tn.ID, claim.Filter{Name: "everything", Enabled: true})
		require.NoError(t, err)
	}
	c.job(t, tn, key, 235000)
	h := claim.Holder{Agent: "00000000-0000-4000-8000-0000000000a1", Worker: worker}
	lr := c.claims.Lease(ctx, tn.ID, h, wire.LeaseRequest{RequestID: "l-" + key, Worker: worker, Key: key})
	require.True(t, lr.Granted, lr.Reason)
	require.True(t, c.claims.Act(ctx, tn.ID, h, wire.ActRequest{RequestID: "a-" + key, Worker: worker, Key: key, Token: lr.Token}).OK)
	sent := time.Now()
	ok := sent.Add(140 * time.Millisecond)
	require.True(t, c.claims.Outcome(ctx, tn.ID, h, wire.Outcome{RequestID: "o-" + key, Worker: worker, Key: key, Token: lr.Token,
		Result: wire.ResultConfirmed, SentAt: &sent, ConfirmedAt: &ok}, claim.Offset{}).OK)
}

// job records a queued job the way the cell dispatcher does.
func (c *console) job(t *testing.T, tn tenant.Tenant, key string, rateCents int64) {
	t.Helper()
	now := time.Now()
	_, err := c.claims.Store().RecordJob(context.Background(), claim.QueuedJob{Tenant: tn.ID, Cell: "default",
		Job: wire.Job{Key: key, PublishedAt: now.Add(-900 * time.Millisecond), ExpiresAt: now.Add(time.Hour), Origin: "Dallas, TX",
			Destination: "Atlanta, GA", Equipment: "Dry Van", WeightLbs: 40000, Miles: 780, RateCents: rateCents},
		SeenAt: now.Add(-600 * time.Millisecond), QueuedAt: now.Add(-550 * time.Millisecond), ClockErrorMS: 3})
	require.NoError(t, err)
}

type auditRow struct{ Actor, Action, Target, Detail string }

// audited reads a chain's entries of one action, newest first.
func (c *console) audited(t *testing.T, chain, action string) []auditRow {
	t.Helper()
	var out []auditRow
	require.NoError(t, db.InTenant(context.Background(), c.d.App, chain, func(tx pgx.Tx) error {
		rows, err := tx.Query(context.Background(), `SELECT actor, action, target, detail::text FROM audit_log
			WHERE action = $1 ORDER BY id DESC`, action)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowToStructByPos[auditRow])
		return err
	}))
	return out
}

// agent creates an account and its agent in the tenant.
func (c *console) agent(t *testing.T, tn tenant.Tenant) string {
	t.Helper()
	ctx := context.Background()
	acct, err := c.fleet.CreateAccount(ctx, tn.ID, fleet.AccountInput{Key: "acct-" + tn.Slug, BoardURL: "http://127.0.0.1:9", Client: tn.Slug,
		Username: "dispatch", Password: "Board-Password-1", TOTPSecret: "JBSWY3DPEHPK3PXP"}, testBy)
	require.NoError(t, err)
	id, _, err := c.fleet.CreateAgent(ctx, tn.ID, acct, "agent-"+tn.Slug, testBy)
	require.NoError(t, err)
	return id
}

func (c *console) tenantRow(t *testing.T, id string) tenant.Tenant {
	t.Helper()
	tn, err := tenant.ByID(context.Background(), c.claims.Store().Pool(), id)
	require.NoError(t, err)
	return tn
}

// TestClaimPagesAreConsolePages: the claims, latency and claim settings
// pages of a tenant for its operator and viewer, each change audited in the
// tenant's chain, bad input refused with 422 and nothing changed, a viewer
// refused every change, and a tenant pause reaching the tenant's agents.
func TestClaimPagesAreConsolePages(t *testing.T) {
	c := newConsole(t)
	ctx := context.Background()
	alpha := c.tenant(t, "alpha")
	const pw = "correct horse battery"
	op, viewer := c.user(t, "op@fleet.test", auth.Operator, pw), c.user(t, "viewer@fleet.test", auth.Viewer, pw)
	c.grant(t, op, alpha)
	c.grant(t, viewer, alpha)
	oc, vc := browserless(), browserless()
	c.enrolled(t, oc, "op@fleet.test", pw)
	c.enrolled(t, vc, "viewer@fleet.test", pw)
	c.claimed(t, alpha, "LD-100", "actor-7")
	agentID := c.agent(t, alpha)
	base := c.srv.URL + "/t/alpha/claims"

	// The tenant's overview links to its claim pages.
	res, body := do(t, oc, "GET", c.srv.URL+"/t/alpha", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `href="/t/alpha/claims"`)
	require.Contains(t, body, `href="/t/alpha/claims/latency"`)

	res, body = do(t, oc, "GET", base, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="claim-LD-100"`)
	require.Contains(t, body, `hx-get="/t/alpha/claims/rows?`)
	require.Contains(t, body, `data-testid="sidebar"`, "the console's layout")
	require.Contains(t, body, "op@fleet.test")
	res, body = do(t, oc, "GET", base+"/rows?state=CONFIRMED", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "LD-100")
	_, body = do(t, oc, "GET", base+"/rows?state=UNKNOWN", nil)
	require.NotContains(t, body, "LD-100")

	res, body = do(t, vc, "GET", base+"/latency?window=1h&by=worker", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="latency-actor-7"`)
	require.Contains(t, body, `data-testid="hist-detect_action"`)
	require.Contains(t, body, `data-testid="series-detect_action"`)
	res, body = do(t, vc, "GET", base+"/latency.csv?window=1h", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.True(t, strings.HasPrefix(body, "job,state,cell,worker,token"))
	require.Contains(t, body, "LD-100,CONFIRMED,default,actor-7")

	// A viewer reads the settings but gets no form, and every change is 403.
	res, body = do(t, vc, "GET", base+"/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="filters"`)
	require.NotContains(t, body, `data-testid="pause-tenant"`)
	for _, p := range []string{"/pause", "/limits", "/filters", "/filters/delete", "/reviews"} {
		res, _ = do(t, vc, "POST", base+p, url.Values{"paused": {"true"}, "daily_booking_cap": {"1"}, "name": {"x"}, "id": {"1"}, "key": {"LD-100"}, "decision": {"approve"}})
		require.Equal(t, http.StatusForbidden, res.StatusCode, "viewer POST "+p)
	}
	require.False(t, c.tenantRow(t, alpha.ID).Paused)
	require.Nil(t, c.tenantRow(t, alpha.ID).DailyBookingCap)

	// Bad input: 422, the message beside the form, what was typed kept,
	// nothing changed.
	res, body = do(t, oc, "POST", base+"/limits", url.Values{"daily_booking_cap": {"lots"}, "review_above_usd": {"2500"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="error-limits"`)
	require.Contains(t, body, `value="lots"`)
	require.Nil(t, c.tenantRow(t, alpha.ID).DailyBookingCap)
	require.Empty(t, c.audited(t, alpha.ID, "claim.limits"))
	res, _ = do(t, oc, "POST", base+"/limits", url.Values{"daily_booking_cap": {"40"}, "review_above_usd": {"2500"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	tn := c.tenantRow(t, alpha.ID)
	require.Equal(t, 40, *tn.DailyBookingCap)
	require.EqualValues(t, 250000, *tn.ReviewAboveCents)
	lim := c.audited(t, alpha.ID, "claim.limits")
	require.Len(t, lim, 1)
	require.Equal(t, "op@fleet.test", lim[0].Actor)
	require.Contains(t, lim[0].Detail, `"daily_booking_cap": 40`)

	res, body = do(t, oc, "POST", base+"/filters", url.Values{"name": {""}, "origins": {"TX"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="error-filter-new"`)
	require.Contains(t, body, `value="TX"`)
	res, _ = do(t, oc, "POST", base+"/filters", url.Values{"name": {"TX reefers"}, "enabled": {"1"},
		"origins": {"TX; ok"}, "equipment": {"Reefer"}, "min_rate_per_mile_usd": {"2.75"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	fs, err := c.claims.Store().Filters(ctx, alpha.ID)
	require.NoError(t, err)
	require.Len(t, fs, 2)
	require.Equal(t, []string{"tx", "ok"}, fs[1].Origins)
	require.Equal(t, 275, fs[1].MinRatePerMileCents)
	require.Len(t, c.audited(t, alpha.ID, "claim.filter.put"), 2) // the test's own, then the operator's
	require.Equal(t, "op@fleet.test", c.audited(t, alpha.ID, "claim.filter.put")[0].Actor)

	// Review: a load above the threshold waits; the operator approves it.
	c.job(t, alpha, "LD-BIG", 400000)
	h := claim.Holder{Agent: "00000000-0000-4000-8000-0000000000a1", Worker: "actor-7"}
	lr := c.claims.Lease(ctx, alpha.ID, h, wire.LeaseRequest{RequestID: "big", Worker: "actor-7", Key: "LD-BIG"})
	require.Equal(t, wire.ReasonReview, lr.Reason)
	_, body = do(t, oc, "GET", base+"/settings", nil)
	require.Contains(t, body, `data-testid="review-LD-BIG"`)
	res, _ = do(t, oc, "POST", base+"/reviews", url.Values{"key": {"LD-BIG"}, "decision": {"approve"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Len(t, c.audited(t, alpha.ID, "claim.review.request"), 1)
	ap := c.audited(t, alpha.ID, "claim.review.approve")
	require.Len(t, ap, 1)
	require.Equal(t, "op@fleet.test", ap[0].Actor)
	lr = c.claims.Lease(ctx, alpha.ID, h, wire.LeaseRequest{RequestID: "big2", Worker: "actor-7", Key: "LD-BIG"})
	require.True(t, lr.Granted, lr.Reason)

	// Pause: audited in the tenant's chain, and the tenant's agent gets a
	// configure command whose configuration says paused.
	res, _ = do(t, oc, "POST", base+"/pause", url.Values{"paused": {"true"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.True(t, c.tenantRow(t, alpha.ID).Paused)
	pa := c.audited(t, alpha.ID, "claim.pause")
	require.Len(t, pa, 1)
	require.Equal(t, "op@fleet.test", pa[0].Actor)
	require.Len(t, c.audited(t, alpha.ID, "fleet.agents.configure"), 1)
	cmds, err := c.fleet.Pending(ctx, alpha.ID, agentID)
	require.NoError(t, err)
	require.Len(t, cmds, 1)
	require.Equal(t, fleet.CmdConfigure, cmds[0].Kind)
	cfg, _, err := c.fleet.Welcome(ctx, fleet.Agent{ID: agentID, Tenant: alpha.ID, AccountID: accountOf(t, c, alpha.ID, agentID)})
	require.NoError(t, err)
	require.True(t, cfg.Paused, "the configuration sent to the agent carries the pause")
	_, body = do(t, oc, "GET", base, nil)
	require.Contains(t, body, `data-testid="tenant-paused"`)
	res, _ = do(t, oc, "POST", base+"/pause", url.Values{"paused": {"false"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.False(t, c.tenantRow(t, alpha.ID).Paused)
	require.Len(t, c.audited(t, alpha.ID, "claim.resume"), 1)
	cfg, _, err = c.fleet.Welcome(ctx, fleet.Agent{ID: agentID, Tenant: alpha.ID, AccountID: accountOf(t, c, alpha.ID, agentID)})
	require.NoError(t, err)
	require.False(t, cfg.Paused)

	// The operator reaches no admin page.
	for _, p := range []string{"/admin/cells", "/admin/settings"} {
		res, _ = do(t, oc, "GET", c.srv.URL+p, nil)
		require.Equal(t, http.StatusForbidden, res.StatusCode, p)
	}
}

func accountOf(t *testing.T, c *console, tenantID, agentID string) string {
	var id string
	require.NoError(t, db.TenantRow(context.Background(), c.d.App, tenantID, `SELECT account_id::text FROM agents WHERE id = $1`, agentID).Scan(&id))
	return id
}

// TestAdminCellsAndGlobalPause: the admin's cells page (routing read on the
// audited cross-tenant path), cell changes audited in the system chain (a
// tenant's move in its own chain too), and the global pause audited and sent
// to every tenant's agents.
func TestAdminCellsAndGlobalPause(t *testing.T) {
	c := newConsole(t)
	alpha, bravo := c.tenant(t, "alpha"), c.tenant(t, "bravo")
	const pw = "Quiet-Harbour-Lantern-42"
	c.user(t, "admin@fleet.test", auth.Admin, pw)
	ac := browserless()
	c.enrolled(t, ac, "admin@fleet.test", pw)
	agentA, agentB := c.agent(t, alpha), c.agent(t, bravo)

	res, body := do(t, ac, "GET", c.srv.URL+"/admin/cells", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="cell-default"`)
	require.Contains(t, body, `data-testid="route-alpha"`)
	require.Contains(t, body, `data-testid="route-bravo"`)
	require.Contains(t, body, `href="/admin/cells"`, "the sidebar links the page")
	cross := c.audited(t, audit.System, audit.CrossTenant)
	require.NotEmpty(t, cross)
	require.Equal(t, "admin@fleet.test", cross[0].Actor)
	require.Equal(t, "/admin/cells", cross[0].Target)

	res, body = do(t, ac, "POST", c.srv.URL+"/admin/cells", url.Values{"name": {"East 2"}, "redis_url": {"redis://:Sekret-Pass-9@127.0.0.1:6390/0"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="error-put"`)
	require.NotContains(t, body, "Sekret-Pass-9", "the Redis password is never echoed")
	require.Empty(t, c.audited(t, audit.System, "cell.put"))
	res, _ = do(t, ac, "POST", c.srv.URL+"/admin/cells", url.Values{"name": {"east-2"}, "redis_url": {"redis://:Sekret-Pass-9@127.0.0.1:6390/0"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	put := c.audited(t, audit.System, "cell.put")
	require.Len(t, put, 1)
	require.Equal(t, "east-2", put[0].Target)
	require.NotContains(t, put[0].Detail, "Sekret-Pass-9", "the audit keeps the URL without its password")
	_, body = do(t, ac, "GET", c.srv.URL+"/admin/cells", nil)
	require.Contains(t, body, `data-testid="cell-east-2"`)
	require.NotContains(t, body, "Sekret-Pass-9")

	res, _ = do(t, ac, "POST", c.srv.URL+"/admin/cells/route", url.Values{"tenant": {alpha.ID}, "cell": {"east-2"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "east-2", c.tenantRow(t, alpha.ID).Cell)
	require.Len(t, c.audited(t, audit.System, "cell.route"), 1)
	require.Len(t, c.audited(t, alpha.ID, "cell.route"), 1, "the tenant's operators see the move in its chain")
	res, _ = do(t, ac, "POST", c.srv.URL+"/admin/cells/delete", url.Values{"name": {"east-2"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Empty(t, c.audited(t, audit.System, "cell.delete"), "a cell in use is not deleted")
	do(t, ac, "POST", c.srv.URL+"/admin/cells/route", url.Values{"tenant": {alpha.ID}, "cell": {"default"}})
	res, _ = do(t, ac, "POST", c.srv.URL+"/admin/cells/delete", url.Values{"name": {"east-2"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Len(t, c.audited(t, audit.System, "cell.delete"), 1)

	res, body = do(t, ac, "GET", c.srv.URL+"/admin/settings", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="switch-alpha"`)
	require.Contains(t, body, `data-testid="pause-fleet"`)
	res, _ = do(t, ac, "POST", c.srv.URL+"/admin/settings/pause", url.Values{"paused": {"true"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	paused, err := c.claims.Store().FleetPaused(context.Background())
	require.NoError(t, err)
	require.True(t, paused)
	pa := c.audited(t, audit.System, "claim.pause")
	require.Len(t, pa, 1)
	require.Equal(t, "admin@fleet.test", pa[0].Actor)
	for tn, agentID := range map[string]string{alpha.ID: agentA, bravo.ID: agentB} {
		cmds, err := c.fleet.Pending(context.Background(), tn, agentID)
		require.NoError(t, err)
		require.Len(t, cmds, 1, "every tenant's agent is told")
		require.Equal(t, fleet.CmdConfigure, cmds[0].Kind)
		require.Len(t, c.audited(t, tn, "fleet.agents.configure"), 1)
	}
	_, body = do(t, ac, "GET", c.srv.URL+"/t/bravo/claims", nil)
	require.Contains(t, body, `data-testid="fleet-paused"`)
	res, _ = do(t, ac, "POST", c.srv.URL+"/admin/settings/pause", url.Values{"paused": {"false"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Len(t, c.audited(t, audit.System, "claim.resume"), 1)
}
