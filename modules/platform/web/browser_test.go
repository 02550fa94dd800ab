package web_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod/lib/proto"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/platform/registry"
)

// TestBrowserPlatformPageFits renders the platform page in Chromium with
// a held account on a real target: the check, run by its button (htmx
// swaps the report in), shows its report beside the spec at 1366 px and
// below it at 390 px; at both widths neither the page nor a card scrolls
// sideways. With FLEET_SCREENSHOTS set it saves a screenshot at each.
func TestBrowserPlatformPageFits(t *testing.T) {
	ctx := context.Background()
	c := paneltest.New(t)
	acme := c.Tenant(t, "acme")
	const email, pw = "admin@fleet.test", "Quiet-Harbour-Lantern-42"
	c.User(t, email, auth.Admin, pw)
	bd := boardtest.Start(t)
	const boardPW = "Board-Password-Nine-9"
	ba, err := bd.CreateAccount(ctx, board.AccountSpec{Username: "dispatch-1", Password: boardPW, Client: "acme"})
	require.NoError(t, err)
	_, err = bd.Publish(ctx, 3, nil)
	require.NoError(t, err)
	acct, err := c.Fleet.CreateAccount(ctx, acme.ID, fleet.AccountInput{Key: "north-warehouse-dispatch-1", BoardURL: bd.URL(), Client: "acme",
		Username: "dispatch-1", Password: boardPW, TOTPSecret: ba.TOTPSecret}, paneltest.By)
	require.NoError(t, err)
	src, err := os.ReadFile("../../../examples/platforms/sandbox.yaml")
	require.NoError(t, err)
	st := registry.New(c.DB.App)
	v, _, err := st.Apply(ctx, acme.ID, paneltest.By, "acme.yaml", []byte(strings.Replace(string(src), "name: sandbox", "name: acme-board", 1)))
	require.NoError(t, err)
	require.NoError(t, st.SetAccount(ctx, acme.ID, paneltest.By, acct, v.PlatformID, v.Version))

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
	fits := func(name string) {
		t.Helper()
		w := p.MustEval(`() => [document.documentElement.scrollWidth, window.innerWidth]`).Arr()
		require.LessOrEqual(t, w[0].Int(), w[1].Int(), "the page scrolls sideways at %d px: %d px wide", width, w[0].Int())
		over := p.MustEval(`() => [...document.querySelectorAll('.card')].filter(c => c.scrollWidth > c.clientWidth + 1).map(c => (c.dataset.testid || c.id || c.className) + ' ' + c.scrollWidth + '>' + c.clientWidth)`).Arr()
		require.Empty(t, over, "cards that scroll sideways at %d px", width)
		if shots != "" {
			data, err := p.Screenshot(true, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(shots, fmt.Sprintf("%s-%d.png", name, width)), data, 0o644))
		}
	}
	run := func() {
		t.Helper()
		require.NoError(t, p.Navigate(c.Server.URL+"/t/acme/settings/platform?p=acme-board"))
		p.MustWaitLoad()
		require.Contains(t, p.MustElement(`[data-testid="review-gate"]`).MustText(), "claim nothing")
		p.MustElement(`[data-testid="run-check"]`).MustClick()
		require.Equal(t, "passed", p.MustElement(`[data-testid="check-verdict"]`).MustText(), "htmx swapped the report in")
	}
	run()
	spec := p.MustElement(`[data-testid="spec-source"]`).MustShape().Box()
	report := p.MustElement(`[data-testid="check-report"]`).MustShape().Box()
	require.Greater(t, report.X, spec.X+spec.Width-1, "the report is beside the spec at 1366 px")
	fits("platform")

	width = 390
	require.NoError(t, proto.EmulationSetDeviceMetricsOverride{Width: 390, Height: 844, DeviceScaleFactor: 1, Mobile: true}.Call(p))
	run()
	spec = p.MustElement(`[data-testid="spec-source"]`).MustShape().Box()
	report = p.MustElement(`[data-testid="check-report"]`).MustShape().Box()
	require.Greater(t, report.Y, spec.Y, "below it on a phone")
	fits("platform")
}
