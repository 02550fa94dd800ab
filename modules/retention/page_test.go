package retention_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/retention"
	"github.com/fleetwright/fleetwright/modules/schedule"
)

// htmxPost posts a form as htmx does (HX-Request: true).
func htmxPost(t *testing.T, c *http.Client, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("HX-Request", "true")
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestRetentionPage: the retention console page shows each scope's
// settings with what applies, the daily prune's last run, what it deleted
// and its next run; an admin changes a tenant's settings with htmx (the
// section comes back with the change, audited), a bad value is refused
// beside its field and changes nothing (with and without htmx); an
// operator sees only the tenants they reach, without the form, and cannot
// post; the overview's retention figure links here.
func TestRetentionPage(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	a, b := c.Tenant(t, "alpha"), c.Tenant(t, "bravo")
	const pw = "correct horse battery"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	op := c.User(t, "operator@fleet.test", auth.Operator, pw)
	c.Grant(t, op, a)
	admin, oper := paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, admin, "admin@fleet.test", pw)
	c.Enrolled(t, oper, "operator@fleet.test", pw)

	// A resolved alarm of alpha's, 100 days old: past the 90-day default.
	old := c.Clock.Now().Add(-200 * 24 * time.Hour)
	_, err := alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "worker.hung", Key: "w1", Tenant: a.ID, Severity: alarm.Warning,
		Summary: "old", At: old})
	require.NoError(t, err)
	_, err = alarm.ResolveAt(ctx, c.DB.App, a.ID, "worker.hung", "w1", "test", c.Clock.Now().Add(-100*24*time.Hour))
	require.NoError(t, err)

	// The panel's daily prune (the real pruner on the test's clock).
	pruner := &retention.Pruner{DB: c.DB.App, Clock: c.Clock}
	require.NoError(t, c.Schedules.Register(pruner.Kind()))
	_, err = c.Schedules.Ensure(ctx, schedule.System, retention.Spec("40 3 * * *"))
	require.NoError(t, err)

	res, body := paneltest.Do(t, admin, "GET", c.Server.URL+"/retention", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "40 3 * * * UTC", paneltest.TestIDText(t, body, "prune-cron"))
	require.Contains(t, body, `data-testid="prune-last">`)
	require.Contains(t, body, "none yet")
	require.Contains(t, body, `href="/retention"`, "the navigation links the page")
	require.Regexp(t, `data-testid="alpha-alarms">(?s:.*?)data-testid="applies">\s*90 days\s*<span class="small muted">\(default\)`, body)

	c.Clock.Advance(25 * time.Hour)
	require.NoError(t, c.Schedules.Tick(ctx))
	sc, err := c.Schedules.Get(ctx, schedule.System, retention.ScheduleName)
	require.NoError(t, err)
	require.NoError(t, c.Schedules.RunPending(ctx, schedule.System, sc.ID))

	res, body = paneltest.Do(t, admin, "GET", c.Server.URL+"/retention", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Regexp(t, `data-testid="prune-last">[^<]*UTC\s*<span class="badge ok">ok</span>`, body)
	require.Regexp(t, `data-testid="prune-next">\s*\d{4}-\d\d-\d\d 03:40:00 UTC`, body)
	require.Equal(t, "Resolved alarms 1", paneltest.TestIDText(t, body, "pruned-alarms"), "what the last run deleted in alpha")
	bravo := body[strings.Index(body, `data-testid="retention-bravo"`):]
	require.Contains(t, bravo, `data-testid="pruned-nothing-last"`)
	require.NotContains(t, bravo, `data-testid="pruned-older"`)

	// A bad value: refused beside its field, nothing stored.
	form := url.Values{"scope": {"alpha"}, "alarms": {"soon"}, "crawl_items": {"forever"}}
	res, body = htmxPost(t, admin, c.Server.URL+"/admin/retention", form)
	require.Equal(t, http.StatusOK, res.StatusCode, "htmx swaps the section in")
	require.True(t, strings.HasPrefix(strings.TrimSpace(body), `<section class="card flush" id="retention-alpha"`), "only the section comes back")
	require.Equal(t, "One value is not valid; nothing was changed.", paneltest.TestIDText(t, body, "retention-error"))
	require.Regexp(t, `name="alarms" value="soon"[^>]*aria-invalid="true"/?>\s*<div class="field-error"[^>]*data-testid="field-error">Write a number of days`, body)
	res, body = paneltest.Do(t, admin, "POST", c.Server.URL+"/admin/retention", form)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, "without htmx: the whole page, 400")
	require.Contains(t, body, `data-testid="retention-error"`)
	require.Contains(t, body, `data-testid="retention-status"`)
	s, err := retention.Load(ctx, c.DB.App, a.ID)
	require.NoError(t, err)
	require.Empty(t, s.Tenant, "nothing was changed")

	// Good values: stored, audited, the section says what changed.
	form.Set("alarms", "30")
	res, body = htmxPost(t, admin, c.Server.URL+"/admin/retention", form)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "Saved: crawl_items, alarms.", paneltest.TestIDText(t, body, "retention-saved"))
	require.Regexp(t, `data-testid="alpha-alarms">(?s:.*?)data-testid="applies">\s*30 days\s*<span class="small muted">\(tenant\)`, body)
	s, err = retention.Load(ctx, c.DB.App, a.ID)
	require.NoError(t, err)
	require.Equal(t, map[retention.Kind]int{retention.Alarms: 30, retention.CrawlItems: 0}, s.Tenant)
	res, _ = htmxPost(t, admin, c.Server.URL+"/admin/retention", url.Values{"scope": {"alpha"}, "alarms": {""}, "crawl_items": {"forever"}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	s, err = retention.Load(ctx, c.DB.App, a.ID)
	require.NoError(t, err)
	require.Equal(t, map[retention.Kind]int{retention.CrawlItems: 0}, s.Tenant, "empty falls back to the global setting")
	var sets []string
	super, err := pgx.Connect(ctx, c.DB.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	rows, err := super.Query(ctx, `SELECT actor || ' ' || target || ' ' || (detail->>'days') FROM audit_log
		WHERE action = 'retention.set' AND tenant_id = $1 ORDER BY id`, a.ID)
	require.NoError(t, err)
	sets, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"admin@fleet.test crawl_items forever", "admin@fleet.test alarms 30 days", "admin@fleet.test alarms default"}, sets)

	// An unknown tenant is refused.
	res, body = paneltest.Do(t, admin, "POST", c.Server.URL+"/admin/retention", url.Values{"scope": {"nobody"}, "alarms": {"5"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Contains(t, body, "Unknown tenant")

	// An operator: their tenant only, read-only.
	res, body = paneltest.Do(t, oper, "GET", c.Server.URL+"/retention", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="retention-alpha"`)
	require.NotContains(t, body, `data-testid="retention-bravo"`)
	require.NotContains(t, body, `name="alarms"`)
	require.Regexp(t, `data-testid="alpha-crawl_items">(?s:.*?)data-testid="own">\s*forever`, body)
	res, _ = htmxPost(t, oper, c.Server.URL+"/admin/retention", url.Values{"scope": {"alpha"}, "alarms": {"1"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	_ = b

	// The overview shows the last prune and links here.
	res, body = paneltest.Do(t, admin, "GET", c.Server.URL+"/", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "1 rows pruned", paneltest.TestIDText(t, body, "retention-state"))
	require.Regexp(t, `<a class="card stat" href="/retention" data-testid="fig-retention">`, body)
}
