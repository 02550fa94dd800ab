package web_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-rod/rod/lib/proto"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// traffic runs n claims of the tenant through the engine with varied
// timings and outcomes, as a busy minute would leave them.
func traffic(t *testing.T, c *paneltest.Console, tn tenant.Tenant, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := c.Claims.PutFilter(ctx, paneltest.By, tn.ID, claim.Filter{Name: "Texas dry vans", Enabled: true, Origins: []string{"tx"}})
	require.NoError(t, err)
	rnd := rand.New(rand.NewPCG(1, 2))
	// Two agents, each with actor-1 … actor-2: the pages must tell them
	// apart.
	agents := []string{namedAgent(t, c, tn, "east-1"), namedAgent(t, c, tn, "west-1")}
	for i := range n {
		key := fmt.Sprintf("LD-%05d", 41200+i)
		now := time.Now()
		seen := now.Add(-time.Duration(40+rnd.IntN(160)) * time.Millisecond)
		_, err := c.Claims.Store().RecordJob(ctx, claim.QueuedJob{Tenant: tn.ID, Cell: "default",
			Job: wire.Job{Key: key, PublishedAt: seen.Add(-time.Duration(300+rnd.IntN(900)) * time.Millisecond), ExpiresAt: now.Add(time.Hour),
				Origin: "Dallas, TX", Destination: "Atlanta, GA", Equipment: "Dry Van", WeightLbs: 40000, Miles: 780, RateCents: 235000},
			SeenAt: seen, QueuedAt: seen.Add(time.Duration(1+rnd.IntN(4)) * time.Millisecond), ClockErrorMS: 3})
		require.NoError(t, err)
		worker := fmt.Sprintf("actor-%d", 1+(i/2)%2)
		h := claim.Holder{Agent: agents[i%2], Worker: worker}
		lr := c.Claims.Lease(ctx, tn.ID, h, wire.LeaseRequest{RequestID: key, Worker: worker, Key: key})
		require.True(t, lr.Granted, lr.Reason)
		if i%9 == 8 {
			continue // still LEASED
		}
		require.True(t, c.Claims.Act(ctx, tn.ID, h, wire.ActRequest{RequestID: key, Worker: worker, Key: key, Token: lr.Token}).OK)
		if i%11 == 10 {
			continue // still ACTING
		}
		sent := time.Now().Add(time.Duration(2+rnd.IntN(30)) * time.Millisecond)
		ok := sent.Add(time.Duration(90+rnd.IntN(260)) * time.Millisecond)
		res, detail := wire.ResultConfirmed, "booked"
		switch {
		case i%7 == 3:
			res, detail = wire.ResultTaken, "the board gave it to another client"
		case i%13 == 5:
			res, detail = wire.ResultNotSent, "local deadline passed before sending"
		}
		require.True(t, c.Claims.Outcome(ctx, tn.ID, h, wire.Outcome{RequestID: key, Worker: worker, Key: key, Token: lr.Token,
			Result: res, SentAt: &sent, ConfirmedAt: &ok, Detail: detail}, claim.Offset{}).OK)
	}
}

// TestBrowserClaimPages renders the claim pages in real Chromium for a
// signed-in admin: the shared layout, the live table, the SVG charts, the
// settings forms, the admin pages. With FLEET_SCREENSHOTS set it saves a
// screenshot of each, for people to look at.
func TestBrowserClaimPages(t *testing.T) {
	c := paneltest.New(t)
	const email, pw = "admin@fleet.test", "Quiet-Harbour-Lantern-42"
	c.User(t, email, auth.Admin, pw)
	acme := c.Tenant(t, "acme")
	c.Tenant(t, "globex")
	traffic(t, c, acme, 60)
	// One claim given up after an unknown outcome, by an agent the panel
	// no longer knows: its badges must not push the table sideways.
	rc, err := river.NewClient(riverpgxv5.New(c.DB.App), &river.Config{})
	require.NoError(t, err)
	c.Claims.Store().SetEnqueuer(rc)
	givenUp(t, c, acme, "LD-99999", claim.Holder{Agent: "00000000-0000-4000-8000-0000000000a1", Worker: "actor-9"})
	c.Job(t, acme, "LD-90001", 780000)
	require.NoError(t, c.Claims.Store().SetLimits(context.Background(), paneltest.By, acme.ID, claim.Limits{ReviewAboveCents: ptr(int64(500000))}))
	lr := c.Claims.Lease(context.Background(), acme.ID, claim.Holder{Agent: "00000000-0000-4000-8000-0000000000a1", Worker: "actor-1"},
		wire.LeaseRequest{RequestID: "r", Worker: "actor-1", Key: "LD-90001"})
	require.Equal(t, wire.ReasonReview, lr.Reason)
	c.Agent(t, acme)

	// Sign in over HTTP (enrolment included), then hand the session to the
	// browser.
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

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{Width: 1366, Height: 900})
	require.NoError(t, err)
	defer b.Close()
	p, err := b.Page(ctx)
	require.NoError(t, err)
	p = p.Timeout(30 * time.Second)
	require.NoError(t, p.SetCookies([]*proto.NetworkCookieParam{{Name: account.DevCookieName, Value: session, URL: c.Server.URL}}))
	shots := os.Getenv("FLEET_SCREENSHOTS")
	visit := func(path, name, wantTitle string) {
		t.Helper()
		require.NoError(t, p.Navigate(c.Server.URL+path))
		p.MustWaitLoad()
		require.Equal(t, wantTitle, p.MustElement(`[data-testid="page-title"]`).MustText(), path)
		require.True(t, p.MustHas(`[data-testid="sidebar"]`))
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
		// Nor does any box in it (a wide table in a scrolling card).
		over := p.MustEval(`() => { let over = 0, what = "";
			for (const el of document.querySelectorAll("*")) {
				const ox = getComputedStyle(el).overflowX;
				if ((ox === "auto" || ox === "scroll") && el.clientWidth > 0 && el.scrollWidth - el.clientWidth > over) {
					over = el.scrollWidth - el.clientWidth; what = el.className || el.tagName;
				}
			}
			return [over, what]; }`).Arr()
		require.LessOrEqual(t, over[0].Int(), 0, "%s: a box (%s) scrolls sideways by %d px", path, over[1].Str(), over[0].Int())
	}
	visit("/t/acme/claims", "claims", "Acme Freight · Claims")
	noSideways("/t/acme/claims at 1366 px")
	require.Len(t, p.MustElements(`[data-testid="claims-table"] tbody tr`), 50, "a page of 50")
	require.Contains(t, p.MustElement(`[data-testid="claims-table"]`).MustText(), "east-1 · actor-1")
	require.Contains(t, p.MustElement(`[data-testid="claims-table"]`).MustText(), "west-1 · actor-1")
	require.True(t, p.MustHas(`[data-testid="tabs"] a.active[href="/t/acme/claims"]`))
	// The live table refreshes itself (htmx) without losing its rows: wait
	// for a refresh to have been swapped in.
	p.MustEval(`() => { window.fleetSwaps = 0; document.body.addEventListener("htmx:afterSettle", () => { window.fleetSwaps++ }) }`)
	require.Eventually(t, func() bool {
		v, err := p.Eval(`() => window.fleetSwaps > 0`)
		return err == nil && v.Value.Bool()
	}, 30*time.Second, 50*time.Millisecond, "the table refreshed itself")
	require.Len(t, p.MustElements(`[data-testid="claims-table"] tbody tr`), 50)

	// The next page has the other 10; a click anywhere on a row opens the
	// load's story.
	wait := p.MustWaitNavigation()
	p.MustElement(`[data-testid="page-next"]`).MustClick()
	wait()
	require.Len(t, p.MustElements(`[data-testid="claims-table"] tbody tr`), 11)
	require.Equal(t, "51–61 of 61 · page 2 of 2", p.MustElement(`[data-testid="page-of"]`).MustText())
	noSideways("/t/acme/claims?page=2")
	first := p.MustElement(`[data-testid="claims-table"] tbody tr`)
	key := first.MustElement(`a.row-link`).MustText()
	// Click the middle of the row's Detail cell, not the link: the whole
	// row is the link.
	box := first.MustElement(`td.detail`).MustShape().Box()
	wait = p.MustWaitNavigation()
	p.Mouse.MustMoveTo(box.X+box.Width/2, box.Y+box.Height/2)
	p.Mouse.MustClick(proto.InputMouseButtonLeft)
	wait()
	require.Equal(t, "Acme Freight · Load "+key, p.MustElement(`[data-testid="page-title"]`).MustText())
	require.True(t, p.MustHas(`[data-testid="attempts"] tbody tr[data-testid^="attempt-"]`))
	noSideways("the story of " + key)
	visit("/t/acme/claims/load?key="+url.QueryEscape(lostKey(t, c, acme)), "claim-story-taken", "Acme Freight · Load "+lostKey(t, c, acme))
	require.Contains(t, p.MustElement(`[data-testid="margin"]`).MustText(), "Margin: not known")
	noSideways("the story of a lost load")

	visit("/t/acme/claims/latency?window=1h", "latency", "Acme Freight · Latency")
	require.True(t, p.MustHas(`svg[data-testid="hist-detect_action"] rect`))
	require.True(t, p.MustHas(`svg[data-testid="series-detect_action"] polyline`))
	visit("/t/acme/claims/settings", "claim-settings", "Acme Freight · Claim settings")
	require.True(t, p.MustHas(`[data-testid="review-LD-90001"]`))
	require.True(t, p.MustHas(`[data-testid="pause-tenant"]`))

	// Pausing from the page asks first, saying what it does; confirmed,
	// the flash says so and the switch says since when and by whom.
	wait = p.MustWaitNavigation()
	p.MustElement(`[data-testid="pause-tenant"]`).MustClick()
	wait()
	require.Equal(t, "Pause the claims of Acme Freight?", p.MustElement(`[data-testid="confirm-question"]`).MustText())
	require.Contains(t, p.MustElement(`[data-testid="confirm"]`).MustText(), "takes no new load")
	paused, err := c.Claims.Store().PauseOf(context.Background(), acme.ID)
	require.NoError(t, err)
	require.False(t, paused.Paused, "nothing paused before the confirmation")
	wait = p.MustWaitNavigation()
	p.MustElement(`[data-testid="confirm-yes"]`).MustClick()
	wait()
	require.Regexp(t, `^Paused since \d\d:\d\d UTC by admin@fleet.test$`, p.MustElement(`[data-testid="tenant-state"]`).MustText())
	require.Contains(t, p.MustElement(`[data-testid="flash"]`).MustText(), "paused")
	visit("/admin/settings", "settings", "Settings")
	require.True(t, p.MustHas(`[data-testid="switch-acme"] .badge.bad`))
	visit("/admin/cells", "cells", "Cells")
	require.True(t, p.MustHas(`[data-testid="route-globex"]`))
	visit("/t/acme", "tenant-overview", "Acme Freight")

	// A phone: the claims page and a story fit 390 px.
	require.NoError(t, proto.EmulationSetDeviceMetricsOverride{Width: 390, Height: 844, DeviceScaleFactor: 1, Mobile: true}.Call(p))
	visit("/t/acme/claims", "claims-390", "Acme Freight · Claims")
	visit("/t/acme/claims/load?key="+url.QueryEscape(lostKey(t, c, acme)), "claim-story-390", "Acme Freight · Load "+lostKey(t, c, acme))
}

// lostKey is a load of the tenant that the board gave to another client.
func lostKey(t *testing.T, c *paneltest.Console, tn tenant.Tenant) string {
	t.Helper()
	p, err := c.Claims.Store().Claims(context.Background(), tn.ID, claim.ClaimQuery{State: claim.Taken, Window: time.Hour, Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, p.Claims)
	return p.Claims[0].Key
}

func ptr[T any](v T) *T { return &v }
