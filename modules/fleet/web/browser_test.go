package web_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestBrowserFleetAgentAndAlarmsFit renders, in Chromium, a realistic
// fleet: seven agents with two workers each, one with a hung watcher, one
// with a worker out of its restart budget, one offline for seven minutes
// (and once before, for ten). At 1366 px the fleet page and the alarms page
// scroll sideways neither as a whole nor inside a card; the fleet lists the
// agents that need a person first, each with its reason and a way to its
// page; the offline agent's page shows its outages and its actions; on the
// alarms page an acknowledgement says who, and a silence takes the alarm
// out of the tab title's count until the console's clock passes its end.
// At 390 px none of these pages scrolls sideways. With FLEET_SCREENSHOTS
// set it saves a screenshot of each page at both widths.
func TestBrowserFleetAgentAndAlarmsFit(t *testing.T) {
	clk := clock.NewFake(time.Now())
	c := paneltest.NewClock(t, nil, clk)
	ctx := context.Background()
	const email, pw = "admin@fleet.test", "Quiet-Harbour-Lantern-42"
	c.User(t, email, auth.Admin, pw)
	acme := c.Tenant(t, "acme")
	replica := "00000000-0000-4000-8000-0000000000f2"
	_, err := c.DB.App.Exec(ctx, `INSERT INTO panel_replicas (id, host, listen, version, pid, started_at, last_seen)
		VALUES ($1, 'panel-1', '127.0.0.1:8443', 'test', 1, now(), now() + interval '1 day') ON CONFLICT (id) DO NOTHING`, replica)
	require.NoError(t, err)
	ids := map[string]string{}
	for i, key := range []string{"north-1", "north-2", "north-3", "south-eu-west-warehouse-4", "south-5", "east-6", "east-7"} {
		acct, err := c.Fleet.CreateAccount(ctx, acme.ID, fleet.AccountInput{Key: key, Region: "us-east", BoardURL: "http://127.0.0.1:9", Client: "acme",
			Username: "dispatch-" + key, Password: "Board-Password-1", TOTPSecret: "JBSWY3DPEHPK3PXP",
			Workers: []wire.WorkerSpec{{Name: "watcher-1", Kind: "watcher"}, {Name: "http_actor-1", Kind: "http_actor"}}}, paneltest.By)
		require.NoError(t, err)
		id, _, err := c.Fleet.CreateAgent(ctx, acme.ID, acct, "agent-"+key, paneltest.By)
		require.NoError(t, err)
		ids[key] = id
		require.NoError(t, db.InTenant(ctx, c.DB.App, acme.ID, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE agents SET connected = true, replica_id = $2, last_seen = now(), host = $3, remote_addr = $4,
				build = 'fleetwright v0.9.3 (linux/amd64, go1.24)', protocol = 5, clock_offset_ms = $5, clock_error_ms = 1.5 WHERE id = $1`,
				id, replica, "host-"+key+".fleet.internal", fmt.Sprintf("198.51.100.%d:41%03d", 10+i, i), float64(i)*1.7-3)
			return err
		}))
		st := wire.State{Workers: []wire.WorkerState{{Name: "watcher-1", Kind: "watcher", State: wire.WorkerRunning},
			{Name: "http_actor-1", Kind: "http_actor", State: wire.WorkerRunning}}}
		if key == "south-5" {
			st.Workers[1] = wire.WorkerState{Name: "http_actor-1", Kind: "http_actor", State: wire.WorkerStopped, Restarts: 5}
		}
		require.NoError(t, c.Fleet.SaveState(ctx, fleet.Agent{ID: id, Tenant: acme.ID}, st))
		require.NoError(t, c.Fleet.AddEvent(ctx, fleet.Agent{ID: id, Tenant: acme.ID}, wire.Event{Level: wire.LevelInfo, Kind: "started",
			Message: "agent started: 2 workers under the supervisor (budget 5 restarts within 300 s); Chrome profile restored", At: time.Now().Add(-3 * time.Hour)}))
	}
	hungID, offID := ids["north-3"], ids["east-6"]
	_, err = alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "worker.hung", Key: hungID + "/watcher-1", Tenant: acme.ID, Severity: alarm.Critical,
		Summary: "watcher-1 on agent-north-3 is hung: alive with work, nothing completed for 3 min; its oldest task waits since the last sweep",
		Detail:  "oldest task 4 min 12 s old; 0 completions since the last sweep. The panel never restarts it on its own: restart it from the fleet page.",
		Link:    "/t/acme/fleet/agents/" + hungID, At: clk.Now()})
	require.NoError(t, err)
	// The offline agent: silent for 7 minutes now, and once before for 10.
	now := clk.Now()
	lastWord := now.Add(-7 * time.Minute)
	past := now.Add(-3 * time.Hour)
	require.NoError(t, db.InTenant(ctx, c.DB.App, acme.ID, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE agents SET connected = false, last_seen = $2 WHERE id = $1`, offID, lastWord); err != nil {
			return err
		}
		for _, ev := range []struct {
			at, since        time.Time
			level, kind, msg string
		}{
			{past.Add(90 * time.Second), past, "error", "agent.offline", "offline: not heard from since " + past.UTC().Format("15:04:05 UTC")},
			{past.Add(10 * time.Minute), time.Time{}, "info", "agent.back", "back online after 10 min without a word"},
			{lastWord.Add(90 * time.Second), lastWord, "error", "agent.offline", "offline: not heard from since " + lastWord.UTC().Format("15:04:05 UTC")},
		} {
			var fields any
			if !ev.since.IsZero() {
				fields = map[string]any{"since": ev.since}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO agent_events (tenant_id, agent_id, at, level, kind, message, fields)
				VALUES (app_tenant(), $1, $2, $3, $4, $5, COALESCE($6::jsonb, '{}'))`, offID, ev.at, ev.level, ev.kind, ev.msg, fields); err != nil {
				return err
			}
		}
		return nil
	}))
	_, err = alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "agent.offline", Key: offID, Tenant: acme.ID, Severity: alarm.Critical,
		Summary: "agent agent-east-6 is offline: not heard from since " + past.UTC().Format("15:04:05 UTC"), At: past.Add(90 * time.Second)})
	require.NoError(t, err)
	_, err = alarm.ResolveAt(ctx, c.DB.App, acme.ID, "agent.offline", offID, "health", past.Add(10*time.Minute))
	require.NoError(t, err)
	_, err = alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "agent.offline", Key: offID, Tenant: acme.ID, Severity: alarm.Critical,
		Summary: "agent agent-east-6 is offline: not heard from since " + lastWord.UTC().Format("15:04:05 UTC") + " (7 min ago; allowance 1 min 30 s); its workers are unknown",
		Link:    "/t/acme/fleet/agents/" + offID, At: lastWord.Add(90 * time.Second)})
	require.NoError(t, err)
	for _, j := range []string{"shop-prices-eu-west-long-name", "catalogue"} {
		_, err = alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "crawl.zero_results", Key: j, Tenant: acme.ID, Severity: alarm.Warning,
			Summary: "crawl " + j + " found no item where 40 to 60 were expected · Trace saved", At: clk.Now()})
		require.NoError(t, err)
	}

	cl := paneltest.Browserless()
	c.Enrolled(t, cl, email, pw)
	u, _ := url.Parse(c.Server.URL)
	var session string
	for _, ck := range cl.Jar.Cookies(u) {
		if ck.Name == account.DevCookieName {
			session = ck.Value
		}
	}
	require.NotEmpty(t, session)
	bctx, cancel := context.WithTimeout(ctx, 150*time.Second)
	defer cancel()
	b, err := browser.Launch(bctx, browser.Options{Width: 1366, Height: 900})
	require.NoError(t, err)
	defer b.Close()
	p, err := b.Page(bctx)
	require.NoError(t, err)
	p = p.Timeout(90 * time.Second)
	require.NoError(t, p.SetCookies([]*proto.NetworkCookieParam{{Name: account.DevCookieName, Value: session, URL: c.Server.URL}}))
	shots := os.Getenv("FLEET_SCREENSHOTS")
	width := 1366
	shot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		data, err := p.Screenshot(true, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(shots, fmt.Sprintf("%s-%d.png", name, width)), data, 0o644))
	}
	// fits fails when the page, or any card in it, scrolls sideways (a
	// card's own scroll would hide a cut-off column from the page's width).
	fits := func(path string) {
		t.Helper()
		w := p.MustEval(`() => [document.documentElement.scrollWidth, window.innerWidth]`).Arr()
		require.LessOrEqual(t, w[0].Int(), w[1].Int(), "%s scrolls sideways at %d px: %d px wide", path, width, w[0].Int())
		over := p.MustEval(`() => [...document.querySelectorAll('.card')].filter(c => c.scrollWidth > c.clientWidth + 1).map(c => (c.dataset.testid || c.className) + ' ' + c.scrollWidth + '>' + c.clientWidth)`).Arr()
		require.Empty(t, over, "%s has cards that scroll sideways at %d px", path, width)
	}
	visit := func(path, name string) {
		t.Helper()
		require.NoError(t, p.Navigate(c.Server.URL+path))
		p.MustWaitLoad()
		fits(path)
		shot(name)
	}
	submit := func(el *rod.Element) {
		t.Helper()
		wait := p.MustWaitNavigation()
		el.MustClick()
		wait()
	}

	visit("/t/acme/fleet", "fleet")
	rows := p.MustElements(`[data-testid="agents"] tbody tr`)
	require.Len(t, rows, 7)
	var first []string
	for _, r := range rows[:3] {
		first = append(first, *r.MustAttribute("data-testid"))
	}
	require.ElementsMatch(t, []string{"agent-agent-north-3", "agent-agent-south-5", "agent-agent-east-6"}, first, "what needs a person comes first")
	hungRow := p.MustElement(`[data-testid="agent-agent-north-3"]`)
	require.Contains(t, hungRow.MustElement(`[data-testid="reason-agent-north-3-watcher-1"]`).MustText(), "nothing completed for 3 min")
	require.Contains(t, p.MustElement(`[data-testid="reason-agent-south-5-http_actor-1"]`).MustText(), "out of its restart budget")
	require.Contains(t, p.MustElement(`[data-testid="agent-offline-agent-east-6"]`).MustText(), "not heard from 7 min ago")
	for _, el := range []*rod.Element{hungRow.MustElement(`[data-testid="restart-watcher-1"]`), p.MustElement(`[data-testid="agent-agent-east-6"] [data-testid="agent-open"]`)} {
		requireInWindow(t, p, el)
	}
	require.NotContains(t, p.MustElement(`[data-testid="agents"]`).MustText(), "v0.9.3", "the build is on the agent's page")

	// The offline agent's page: its outages, uptime and actions.
	submit(p.MustElement(`[data-testid="agent-agent-east-6"] [data-testid="agent-open"]`))
	require.True(t, strings.HasSuffix(p.MustInfo().URL, "/t/acme/fleet/agents/"+offID), p.MustInfo().URL)
	fits("agent page")
	shot("agent")
	outages := p.MustElements(`[data-testid="outage"]`)
	require.Len(t, outages, 2)
	require.Contains(t, outages[0].MustText(), "still offline")
	require.Contains(t, outages[0].MustText(), lastWord.UTC().Format("15:04:05 UTC"))
	require.Contains(t, outages[1].MustText(), "10 min")
	require.Regexp(t, `^offline (17|18) min \(98\.\d % up\)$`, p.MustElement(`[data-testid="uptime-day"]`).MustText())
	require.Contains(t, p.MustElement(`[data-testid="agent-facts"]`).MustText(), "fleetwright v0.9.3")
	require.Contains(t, p.MustElement(`[data-testid="agent-events"]`).MustText(), "back online after 10 min")
	for _, a := range []string{"pause", "rotate-token", "retire"} {
		requireInWindow(t, p, p.MustElement(`[data-testid="agent-actions"] [data-testid="`+a+`"]`))
	}

	visit("/t/acme/fleet/accounts", "accounts")
	visit("/t/acme/fleet/assistants", "assistants")
	visit("/limits/assistants", "limits-assistants")

	// Alarms: acknowledge says who; a silence leaves the title's count
	// until the console's clock passes its end.
	titleCount := func() int {
		m := regexp.MustCompile(`^\((\d+)\) `).FindStringSubmatch(p.MustEval(`() => document.title`).Str())
		if m == nil {
			return 0
		}
		var n int
		fmt.Sscan(m[1], &n)
		return n
	}
	visit("/alarms", "alarms")
	before := titleCount()
	require.Positive(t, before)
	hung := `[data-testid="alarm-worker.hung-` + hungID + `/watcher-1"]`
	requireInWindow(t, p, p.MustElement(hung+` [data-testid="silence"]`))
	submit(p.MustElement(hung + ` [data-testid="acknowledge"]`))
	require.Contains(t, p.MustElement(hung+` [data-testid="alarm-acknowledged"]`).MustText(), "acknowledged by "+email)
	p.MustElement(hung + ` [data-testid="silence-for"]`).MustSelect("15 min")
	submit(p.MustElement(hung + ` [data-testid="silence"]`))
	require.Contains(t, p.MustElement(hung+` [data-testid="alarm-silenced"]`).MustText(), "(in 15 min)")
	require.Equal(t, before-1, titleCount(), "a silenced alarm leaves the count")
	fits("/alarms with a silence")
	shot("alarms-silenced")
	clk.Advance(16 * time.Minute)
	visit("/alarms", "alarms-after")
	require.Equal(t, before, titleCount(), "the silence ended on the console's clock")
	has, _, err := p.Has(hung + ` [data-testid="alarm-silenced"]`)
	require.NoError(t, err)
	require.False(t, has)

	// A phone.
	width = 390
	require.NoError(t, proto.EmulationSetDeviceMetricsOverride{Width: 390, Height: 844, DeviceScaleFactor: 1, Mobile: true}.Call(p))
	for _, pg := range []struct{ path, name string }{{"/t/acme/fleet", "fleet"}, {"/t/acme/fleet/agents/" + offID, "agent"},
		{"/t/acme/fleet/accounts", "accounts"}, {"/t/acme/fleet/assistants", "assistants"}, {"/alarms", "alarms"}} {
		visit(pg.path, pg.name)
	}
}

// requireInWindow fails when el lies past the window's right edge.
func requireInWindow(t *testing.T, p *rod.Page, el *rod.Element) {
	t.Helper()
	box := el.MustShape().Box()
	w := p.MustEval(`() => window.innerWidth`).Int()
	require.LessOrEqual(t, box.X+box.Width, float64(w), "the element ends past the window's right edge")
}
