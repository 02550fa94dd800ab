package console_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestBrowserAttentionAlarmsAndPhone renders the console in Chromium for an
// admin with an agent offline, a hung worker with a long summary, three
// crawl alarms and a paused tenant: the tab's title carries the strip's
// count; the alarms page shows tenant, what, raised (with its zone) and
// last seen without a sideways scroll at 1366 px, and filters by kind; at
// 390 px the navigation is behind a menu button that opens it, and neither
// the overview nor the alarms page scrolls sideways. With FLEET_SCREENSHOTS
// set it saves a screenshot of each, for people to look at.
func TestBrowserAttentionAlarmsAndPhone(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	const email, pw = "admin@fleet.test", "Quiet-Harbour-Lantern-42"
	c.User(t, email, auth.Admin, pw)
	acme := c.Tenant(t, "acme")
	agentID := c.Agent(t, acme)
	require.NoError(t, db.InTenant(ctx, c.DB.App, acme.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET last_seen = now() - interval '7 minutes' WHERE id = $1`, agentID)
		return err
	}))
	_, err := alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "worker.hung", Key: agentID + "/watcher-1", Tenant: acme.ID, Severity: alarm.Critical,
		Summary: "watcher-1 on agent-acme is hung: alive with work, nothing completed for 3 min; its oldest task waits since the last sweep",
		Detail:  "oldest task 4 min 12 s old; 0 completions since 20:14 UTC. The panel never restarts it on its own: restart it from the fleet page.",
		Link:    "/t/acme/fleet"})
	require.NoError(t, err)
	for _, j := range []string{"shop-prices-eu-west-long-name", "catalogue", "reviews"} {
		_, err = alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "crawl.zero_results", Key: j, Tenant: acme.ID, Severity: alarm.Warning,
			Summary: "crawl " + j + " found no item where 40 to 60 were expected · Trace saved"})
		require.NoError(t, err)
	}
	require.NoError(t, c.Claims.Store().SetPaused(ctx, paneltest.By, acme.ID, true))

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

	bctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	b, err := browser.Launch(bctx, browser.Options{Width: 1366, Height: 900})
	require.NoError(t, err)
	defer b.Close()
	p, err := b.Page(bctx)
	require.NoError(t, err)
	p = p.Timeout(60 * time.Second)
	require.NoError(t, p.SetCookies([]*proto.NetworkCookieParam{{Name: account.DevCookieName, Value: session, URL: c.Server.URL}}))
	shots := os.Getenv("FLEET_SCREENSHOTS")
	visit := func(path, name string) {
		t.Helper()
		require.NoError(t, p.Navigate(c.Server.URL+path))
		p.MustWaitLoad()
		if shots != "" {
			data, err := p.Screenshot(true, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(shots, name+".png"), data, 0o644))
		}
	}
	noSideways := func(path string) {
		t.Helper()
		w := p.MustEval(`() => [document.documentElement.scrollWidth, window.innerWidth]`).Arr()
		require.LessOrEqual(t, w[0].Int(), w[1].Int(), "%s scrolls sideways: %d px wide in a %d px window", path, w[0].Int(), w[1].Int())
	}
	setWidth := func(w, h int) {
		t.Helper()
		require.NoError(t, proto.EmulationSetDeviceMetricsOverride{Width: w, Height: h, DeviceScaleFactor: 1, Mobile: w < 500}.Call(p))
	}

	visit("/", "overview-1366")
	items := p.MustElements(`[data-testid="attention-item"]`)
	require.GreaterOrEqual(t, len(items), 4, "offline agent, hung worker, crawl alarms, paused tenant")
	title := p.MustEval(`() => document.title`).Str()
	require.True(t, strings.HasPrefix(title, "("+strconv.Itoa(len(items))+") Overview"), title)
	require.Contains(t, p.MustElement(`[data-testid="attention"]`).MustText(), "Agent agent-acme is offline for 7 min")
	require.Contains(t, p.MustElement(`[data-testid="attention"]`).MustText(), "3 crawls found no items")
	noSideways("/")

	visit("/alarms", "alarms-1366")
	noSideways("/alarms")
	row := p.MustElement(`[data-testid="alarm-worker.hung-` + agentID + `/watcher-1"]`)
	require.Equal(t, "Acme Freight", row.MustElement(`[data-testid="alarm-tenant"]`).MustText())
	require.Regexp(t, `^\d\d:\d\d UTC\s+(just now|\d+ min ago)$`, row.MustElement(`[data-testid="alarm-raised"]`).MustText())
	require.Contains(t, row.MustText(), "worker hung")
	requireVisibleInWindow(t, p, row.MustElement(`[data-testid="resolve"]`))
	visit("/alarms?kind=crawl.zero_results", "alarms-kind")
	require.Len(t, p.MustElements(`[data-testid="alarms"] tbody tr`), 3)

	// A phone: the navigation is behind a menu button.
	setWidth(390, 844)
	visit("/", "overview-390")
	noSideways("/ at 390 px")
	require.True(t, p.MustElement(`[data-testid="menu-button"]`).MustVisible())
	require.False(t, p.MustElement(`[data-testid="sidebar"]`).MustVisible(), "the sidebar waits behind the menu")
	p.MustElement(`[data-testid="menu-button"]`).MustClick()
	require.Eventually(t, func() bool { return p.MustElement(`[data-testid="sidebar"]`).MustVisible() }, 10*time.Second, 50*time.Millisecond)
	if shots != "" {
		data, err := p.Screenshot(false, nil)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(shots, "menu-390.png"), data, 0o644))
	}
	p.MustElement(`[data-testid="sidebar"] a[href="/alarms"]`).MustClick()
	require.Eventually(t, func() bool { return strings.HasSuffix(p.MustInfo().URL, "/alarms") }, 10*time.Second, 50*time.Millisecond)
	p.MustWaitLoad()
	noSideways("/alarms at 390 px")
	require.True(t, p.MustElement(`[data-testid="attention"]`).MustVisible())
	visit("/alarms", "alarms-390")
}

// requireVisibleInWindow fails when el lies outside the window's width.
func requireVisibleInWindow(t *testing.T, p *rod.Page, el *rod.Element) {
	t.Helper()
	box := el.MustShape().Box()
	w := p.MustEval(`() => window.innerWidth`).Int()
	require.LessOrEqual(t, box.X+box.Width, float64(w), "the element ends past the window's right edge")
}
