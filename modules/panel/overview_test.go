package panel_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	fwconsole "github.com/fleetwright/fleetwright/modules/console"
	"github.com/fleetwright/fleetwright/modules/notify"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/schedule"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// testid returns the text inside the element with the data-testid.

var hrefRe = regexp.MustCompile(`href="([^"]+)"`)

// figuresLinks are the links inside the live block of an overview.
func figuresLinks(t *testing.T, body string) []string {
	t.Helper()
	i := strings.Index(body, `id="overview-figures"`)
	require.GreaterOrEqual(t, i, 0, "no live overview block")
	var out []string
	for _, m := range hrefRe.FindAllStringSubmatch(body[i:], -1) {
		out = append(out, strings.ReplaceAll(m[1], "&amp;", "&"))
	}
	return out
}

// claimedBy runs one claim of key to a confirmed outcome, held by a real
// agent of the tenant.
func claimedBy(t *testing.T, c *paneltest.Console, tn tenant.Tenant, agentID, key, worker string) {
	t.Helper()
	ctx := context.Background()
	fs, err := c.Claims.Store().Filters(ctx, tn.ID)
	require.NoError(t, err)
	if len(fs) == 0 {
		_, err := c.Claims.PutFilter(ctx, paneltest.By, tn.ID, claim.Filter{Name: "everything", Enabled: true})
		require.NoError(t, err)
	}
	c.Job(t, tn, key, 235000)
	h := claim.Holder{Agent: agentID, Worker: worker}
	lr := c.Claims.Lease(ctx, tn.ID, h, wire.LeaseRequest{RequestID: "l-" + key, Worker: worker, Key: key})
	require.True(t, lr.Granted, lr.Reason)
	require.True(t, c.Claims.Act(ctx, tn.ID, h, wire.ActRequest{RequestID: "a-" + key, Worker: worker, Key: key, Token: lr.Token}).OK)
	sent := time.Now()
	ok := sent.Add(140 * time.Millisecond)
	require.True(t, c.Claims.Outcome(ctx, tn.ID, h, wire.Outcome{RequestID: "o-" + key, Worker: worker, Key: key, Token: lr.Token,
		Result: wire.ResultConfirmed, SentAt: &sent, ConfirmedAt: &ok}, claim.Offset{}).OK)
}

// TestOverviewIsTheOneWindow: the landing page shows the fleet's figures
// for the user's tenants (and the system's for an admin), each linking to
// a page that answers; the live fragment serves the same; a tenant's
// overview shows its own figures and readable activity; alarms are listed
// and resolved by hand, audited.
func TestOverviewIsTheOneWindow(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	acme, beta := c.Tenant(t, "acme"), c.Tenant(t, "beta")
	const pw = "correct horse battery"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, beta)
	admin, oper := paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, admin, "admin@fleet.test", pw)
	c.Enrolled(t, oper, "op@fleet.test", pw)

	agentID := c.Agent(t, acme)
	claimedBy(t, c, acme, agentID, "job-1", "actor-1")
	_, err := alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "worker.hung", Key: agentID + "/actor-1", Tenant: acme.ID,
		Severity: alarm.Critical, Summary: "actor-1 on agent-acme completed nothing for 5m", Link: "/t/acme/fleet"})
	require.NoError(t, err)
	_, err = alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "cell.failing", Key: "eu", Severity: alarm.Critical,
		Summary: "cell eu: its Redis refuses connections", Link: "/admin/cells"})
	require.NoError(t, err)

	// The panel's own audit verification, run by its schedule.
	require.NoError(t, c.Schedules.Register(schedule.Kind{Name: "audit.verify", Handle: func(context.Context, schedule.Run) error { return nil }}))
	_, err = c.Schedules.Ensure(ctx, schedule.System, schedule.Spec{Name: fwconsole.AuditVerifySchedule, Kind: "audit.verify",
		Cron: "*/10 * * * *", TimeZone: "UTC", CatchUp: schedule.One, Enabled: true})
	require.NoError(t, err)
	res, body := paneltest.Do(t, admin, "GET", c.Server.URL+"/", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "not verified yet", paneltest.TestIDText(t, body, "audit-state"))
	c.Clock.Advance(11 * time.Minute)
	require.NoError(t, c.Schedules.Tick(ctx))
	sc, err := c.Schedules.Get(ctx, schedule.System, fwconsole.AuditVerifySchedule)
	require.NoError(t, err)
	require.NoError(t, c.Schedules.RunPending(ctx, schedule.System, sc.ID))

	res, body = paneltest.Do(t, admin, "GET", c.Server.URL+"/", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "0", paneltest.TestIDText(t, body, "duplicates"))
	require.Equal(t, "1 confirmed", paneltest.TestIDText(t, body, "confirmed"))
	require.Equal(t, "0 unknown", paneltest.TestIDText(t, body, "unknown"))
	require.Equal(t, "2", paneltest.TestIDText(t, body, "alarms-open"))
	require.Contains(t, body, `data-testid="alarms-worker.hung"`)
	require.Contains(t, body, `data-testid="alarms-cell.failing"`)
	require.Equal(t, "audit clean", paneltest.TestIDText(t, body, "audit-state"))
	require.Contains(t, body, `data-testid="stage-act_sent_confirmed"`)
	require.Contains(t, body, `data-testid="fig-cells"`)
	require.Contains(t, body, `data-testid="tenant-acme"`)
	require.Contains(t, body, `data-testid="tenant-beta"`)
	require.Contains(t, body, `hx-get="/overview/figures"`)
	// Every figure links to a page that answers.
	links := figuresLinks(t, body)
	require.GreaterOrEqual(t, len(links), 12)
	for _, l := range links {
		if strings.HasPrefix(l, "#") {
			require.Contains(t, body, `id="`+l[1:]+`"`, l)
			continue
		}
		u, err := url.Parse(l)
		require.NoError(t, err)
		u.Fragment = ""
		res, _ := paneltest.Do(t, admin, "GET", c.Server.URL+u.String(), nil)
		require.Equal(t, http.StatusOK, res.StatusCode, "figure link %s", l)
	}
	// The live fragment is the same block.
	res, frag := paneltest.Do(t, admin, "GET", c.Server.URL+"/overview/figures", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "1 confirmed", paneltest.TestIDText(t, frag, "confirmed"))
	require.NotContains(t, frag, "<html")

	// An operator sees their tenants only, and no system figure.
	res, body = paneltest.Do(t, oper, "GET", c.Server.URL+"/", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="tenant-beta"`)
	require.NotContains(t, body, `data-testid="tenant-acme"`)
	require.NotContains(t, body, `data-testid="fig-cells"`)
	require.Equal(t, "0", paneltest.TestIDText(t, body, "alarms-open"))
	require.Equal(t, "0 confirmed", paneltest.TestIDText(t, body, "confirmed"))

	// A tenant's overview: its own figures, and activity with names and actions.
	res, body = paneltest.Do(t, admin, "GET", c.Server.URL+"/t/acme", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `hx-get="/t/acme/overview/figures"`)
	require.Contains(t, body, `data-testid="activity-who">agent-acme / actor-1<`)
	require.NotContains(t, body, "agent:"+agentID)
	require.Contains(t, body, `data-testid="activity-action">claim.`)
	res, frag = paneltest.Do(t, admin, "GET", c.Server.URL+"/t/acme/overview/figures", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "1 confirmed", paneltest.TestIDText(t, frag, "confirmed"))
	require.Equal(t, "1", paneltest.TestIDText(t, frag, "alarms-open"))
	require.NotContains(t, frag, `data-testid="per-tenant"`)
	for _, l := range figuresLinks(t, frag) {
		u, _ := url.Parse(l)
		u.Fragment = ""
		res, _ := paneltest.Do(t, admin, "GET", c.Server.URL+u.String(), nil)
		require.Equal(t, http.StatusOK, res.StatusCode, "tenant figure link %s", l)
	}
	res, _ = paneltest.Do(t, oper, "GET", c.Server.URL+"/t/acme/overview/figures", nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	// The alarms page lists both for the admin; the operator sees neither.
	res, body = paneltest.Do(t, admin, "GET", c.Server.URL+"/alarms", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "actor-1 on agent-acme completed nothing for 5m")
	require.Contains(t, body, "cell eu: its Redis refuses connections")
	res, body = paneltest.Do(t, oper, "GET", c.Server.URL+"/alarms", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, body, "agent-acme")
	require.Contains(t, body, `data-testid="no-alarms"`)

	list, err := alarm.ListTenant(ctx, c.DB.App, acme.ID, true, 0)
	require.NoError(t, err)
	require.Len(t, list, 1)
	res, _ = paneltest.Do(t, oper, "POST", c.Server.URL+"/t/acme/alarms/"+itoa(list[0].ID)+"/resolve", url.Values{})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	res, _ = paneltest.Do(t, admin, "POST", c.Server.URL+"/t/acme/alarms/"+itoa(list[0].ID)+"/resolve", url.Values{})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	open, err := alarm.IsOpen(ctx, c.DB.App, acme.ID, "worker.hung", agentID+"/actor-1")
	require.NoError(t, err)
	require.False(t, open)
	rows := c.Audited(t, acme.ID, "alarm.resolve")
	require.Len(t, rows, 1)
	require.Equal(t, "admin@fleet.test", rows[0].Actor)
	res, body = paneltest.Do(t, admin, "GET", c.Server.URL+"/", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "1", paneltest.TestIDText(t, body, "alarms-open"))
	_ = beta
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestNotificationChannelsPage: an admin adds a webhook (its secret shown
// once, audited) and sends a test alarm that reaches it, signed; the
// secret is never shown again.
func TestNotificationChannelsPage(t *testing.T) {
	c := paneltest.New(t)
	const pw = "correct horse battery"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	admin := paneltest.Browserless()
	c.Enrolled(t, admin, "admin@fleet.test", pw)
	var got []string
	var sigs []string
	var bodies [][]byte
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m notify.Message
		_ = json.Unmarshal(b, &m)
		got, sigs, bodies = append(got, m.Event+" "+m.Alarm.Kind), append(sigs, r.Header.Get("X-Fleetwright-Signature")), append(bodies, b)
	}))
	defer rcv.Close()
	res, body := paneltest.Do(t, admin, "POST", c.Server.URL+"/admin/notify", url.Values{"name": {"Bad Name"}, "kind": {"webhook"}, "target": {rcv.URL}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="channel-error"`)
	res, body = paneltest.Do(t, admin, "POST", c.Server.URL+"/admin/notify", url.Values{"name": {"ops-hook"}, "kind": {"webhook"},
		"target": {rcv.URL + "/hook"}, "min_severity": {"warning"}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	secret := regexp.MustCompile(`whsec_[0-9a-f]{64}`).FindString(body)
	require.NotEmpty(t, secret)
	require.Len(t, c.Audited(t, audit.System, "notify.channel.create"), 1)
	res, body = paneltest.Do(t, admin, "GET", c.Server.URL+"/admin/notify", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="channel-ops-hook"`)
	require.NotContains(t, body, secret, "the secret is shown once")
	res, _ = paneltest.Do(t, admin, "POST", c.Server.URL+"/admin/notify/test", url.Values{})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, []string{"raised notify.test", "resolved notify.test"}, got)
	require.NoError(t, notify.Verify(secret, sigs[0], bodies[0], time.Now(), time.Minute))
	require.NotContains(t, c.Logs.String(), secret)
}

// TestSchedulesPageShowsNextRunsBeforeEnabling: a schedule is created
// disabled with its next five runs shown, enabled by its tenant's
// operator, each change audited; the preview answers as the form is typed.
func TestSchedulesPageShowsNextRunsBeforeEnabling(t *testing.T) {
	c := paneltest.New(t)
	acme := c.Tenant(t, "acme")
	const pw = "correct horse battery"
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, acme)
	cl := paneltest.Browserless()
	c.Enrolled(t, cl, "op@fleet.test", pw)
	require.NoError(t, c.Schedules.Register(schedule.Kind{Name: "crawl.run", Handle: func(context.Context, schedule.Run) error { return nil }}))

	res, body := paneltest.Do(t, cl, "GET", c.Server.URL+"/schedules/preview?cron="+url.QueryEscape("0 6 * * mon-fri")+"&time_zone=Europe/Berlin", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, 5, strings.Count(body, "<li>"))
	require.Contains(t, body, "06:00 CE")
	_, body = paneltest.Do(t, cl, "GET", c.Server.URL+"/schedules/preview?cron=61+*+*+*+*&time_zone=UTC", nil)
	require.Contains(t, body, `data-testid="preview-error"`)

	res, body = paneltest.Do(t, cl, "POST", c.Server.URL+"/t/acme/schedules", url.Values{"name": {"prices"}, "kind": {"crawl.run"},
		"cron": {"0 6 * * mon-fri"}, "time_zone": {"Mars/Base"}, "catch_up": {"one"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, "unknown time zone")
	res, _ = paneltest.Do(t, cl, "POST", c.Server.URL+"/t/acme/schedules", url.Values{"name": {"prices"}, "kind": {"crawl.run"},
		"cron": {"0 6 * * mon-fri"}, "time_zone": {"Europe/Berlin"}, "catch_up": {"all"}, "cap": {"3"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	_, body = paneltest.Do(t, cl, "GET", c.Server.URL+"/schedules", nil)
	i := strings.Index(body, `data-testid="schedule-acme-prices"`)
	require.GreaterOrEqual(t, i, 0)
	row := body[i:]
	row = row[:strings.Index(row, "</tr>")]
	require.Contains(t, row, `data-testid="state">disabled<`)
	require.Equal(t, 5, strings.Count(row, "<li>"), "the next five runs show before enabling")
	require.Contains(t, row, "(cap 3)")
	res, _ = paneltest.Do(t, cl, "POST", c.Server.URL+"/t/acme/schedules/prices/enable", url.Values{})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	sc, err := c.Schedules.Get(context.Background(), acme.ID, "prices")
	require.NoError(t, err)
	require.True(t, sc.Enabled)
	require.NotNil(t, sc.NextRunAt)
	require.Len(t, c.Audited(t, acme.ID, "schedule.create"), 1)
	require.Len(t, c.Audited(t, acme.ID, "schedule.enable"), 1)
	// Not the operator's to change: the system's schedules.
	res, _ = paneltest.Do(t, cl, "POST", c.Server.URL+"/admin/schedules/audit-verify/disable", url.Values{})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
}
