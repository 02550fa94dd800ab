package console_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod/lib/proto"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/browser"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/account"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// overflowJS is how far the page, or any box in it that scrolls sideways
// (a wide table in an overflow-x card), runs past what it shows: 0 when
// everything fits in the window's width.
const overflowJS = `() => {
	let over = document.documentElement.scrollWidth - window.innerWidth;
	let where = over > 0 ? "the page" : "";
	for (const el of document.querySelectorAll("*")) {
		const ox = getComputedStyle(el).overflowX;
		if ((ox === "auto" || ox === "scroll") && el.clientWidth > 0 && el.scrollWidth - el.clientWidth > over) {
			over = el.scrollWidth - el.clientWidth;
			where = el.tagName.toLowerCase() + "." + el.className + " " + (el.getAttribute("data-testid") || "");
		}
	}
	return [over, where];
}`

// TestBrowserWideTablesBecomeListsOnAPhone renders the overview, claims,
// latency, crawl (jobs and one job's runs), audit log, account and claim
// settings pages in Chromium for an admin of two tenants with claims, a
// crawl job with runs and audit entries. At 390 px no page, and no box in
// it, scrolls sideways, and each wide table is a list: its header hidden,
// its rows stacked, every cell but the first labelled with its column
// (data-label shown before the value). At 1366 px the same tables are
// tables again, with their header. With FLEET_SCREENSHOTS set it saves a
// screenshot of each page at both widths.
func TestBrowserWideTablesBecomeListsOnAPhone(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	const email, pw = "admin@fleet.test", "Quiet-Harbour-Lantern-42"
	c.User(t, email, auth.Admin, pw)
	acme := c.Tenant(t, "acme")
	c.Tenant(t, "delta")
	for _, k := range []string{"LD-PHONE-000001", "LD-PHONE-000002", "LD-PHONE-000003"} {
		c.Claimed(t, acme, k, "http_actor-1")
	}

	cl := paneltest.Browserless()
	c.Enrolled(t, cl, email, pw)
	src, err := os.ReadFile("../../examples/crawl/catalogue-http.yaml")
	require.NoError(t, err)
	res, _ := paneltest.Do(t, cl, "POST", c.Server.URL+"/t/acme/crawl/jobs", url.Values{"source": {string(src)}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	jobPath := res.Header.Get("Location")
	require.NotEmpty(t, jobPath)
	// A finished run, as the crawler records one.
	require.NoError(t, db.InTenant(ctx, c.DB.App, acme.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO crawl_runs (tenant_id, job_id, version, state, reason, queued_at, started_at, finished_at, pages, items, bytes)
			SELECT app_tenant(), id, 1, 'succeeded', 'done', now() - interval '1 hour', now() - interval '1 hour', now() - interval '58 minutes', 45, 900, 3250000
			FROM crawl_jobs WHERE name = 'catalogue-http'`)
		return err
	}))

	session := paneltest.SessionCookie(t, cl, c.Server.URL)

	bctx, cancel := context.WithTimeout(ctx, 300*time.Second)
	defer cancel()
	b, err := browser.Launch(bctx, browser.Options{Width: 390, Height: 844})
	require.NoError(t, err)
	defer b.Close()
	p, err := b.Page(bctx)
	require.NoError(t, err)
	p = p.Timeout(90 * time.Second)
	require.NoError(t, p.SetCookies([]*proto.NetworkCookieParam{{Name: account.DevCookieName, Value: session, URL: c.Server.URL}}))
	shots := os.Getenv("FLEET_SCREENSHOTS")

	// Each page with the tables on it that must become lists.
	pages := []struct {
		path   string
		tables []string
	}{
		{"/", []string{`[data-testid="fig-stages"] table`, `[data-testid="per-tenant"] table`}},
		{"/t/acme/claims", []string{`[data-testid="claims-table"]`}},
		{"/t/acme/claims/latency", []string{`[data-testid="latency-tenant"]`}},
		{"/t/acme/crawl", []string{`[data-testid="crawl-jobs"]`}},
		{jobPath, []string{`[data-testid="crawl-runs"]`}},
		{"/audit", []string{`[data-testid="audit"]`}},
		{"/account", []string{`[data-testid="sessions"]`}},
		{"/t/acme/claims/settings", []string{`[data-testid="platforms"] table`}},
	}
	titles, badges := map[string]int{}, map[string]int{}
	for _, width := range []int{390, 1366} {
		require.NoError(t, proto.EmulationSetDeviceMetricsOverride{Width: width, Height: 844, DeviceScaleFactor: 1, Mobile: width < 500}.Call(p))
		phone := width < 760
		for _, pg := range pages {
			require.NoError(t, p.Navigate(c.Server.URL+pg.path))
			p.MustWaitLoad()
			if shots != "" {
				data, err := p.Screenshot(true, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
				require.NoError(t, err)
				name := strings.NewReplacer("/", "_").Replace(strings.Trim(pg.path, "/"))
				require.NoError(t, os.WriteFile(filepath.Join(shots, "lists-"+name+"-"+strconv.Itoa(width)+".png"), data, 0o644))
			}
			over := p.MustEval(overflowJS).Arr()
			require.LessOrEqual(t, over[0].Int(), 0, "%s at %d px scrolls sideways by %d px (%s)", pg.path, width, over[0].Int(), over[1].Str())
			read := p.MustEval(readableJS).Arr()
			require.Empty(t, read[0].Str(), "%s at %d px: chart titles drawn smaller than 9 px", pg.path, width)
			require.Empty(t, read[1].Str(), "%s at %d px: figures whose word badge wraps", pg.path, width)
			titles[pg.path] += read[2].Int()
			badges[pg.path] += read[3].Int()
			for _, sel := range pg.tables {
				// One look at the live document: a page's htmx refresh may
				// replace the table between two calls.
				st := p.MustEval(`sel => {
					const tbl = document.querySelector(sel);
					if (!tbl) return ["missing"];
					const head = tbl.querySelector("thead");
					const td = tbl.querySelector("tbody td[data-label]");
					if (!td) return ["unlabelled"];
					return [tbl.className, head ? getComputedStyle(head).display : "none",
						getComputedStyle(td.parentElement).display, getComputedStyle(td, "::before").content];
				}`, sel).Arr()
				require.Greater(t, len(st), 1, "%s: %s is %s", pg.path, sel, st[0].Str())
				require.Contains(t, strings.Fields(st[0].Str()), "stack-flow", "%s: %s is not marked to stack", pg.path, sel)
				if phone {
					require.Equal(t, "none", st[1].Str(), "%s: %s keeps its header on a phone", pg.path, sel)
					require.Equal(t, "block", st[2].Str(), "%s: %s's rows do not stack on a phone", pg.path, sel)
					require.NotEqual(t, "none", st[3].Str(), "%s: %s's cells show no label on a phone", pg.path, sel)
				} else {
					require.Equal(t, "table-row", st[2].Str(), "%s: %s is a list at %d px", pg.path, sel, width)
					require.Equal(t, "none", st[3].Str(), "%s: %s shows labels at %d px", pg.path, sel, width)
				}
			}
		}
	}
	// The checks above looked at something: the latency page's series
	// and histograms at both widths, the overview's word badges.
	require.GreaterOrEqual(t, titles["/t/acme/claims/latency"], 2*(1+6), "chart titles measured on the latency page")
	require.Positive(t, badges["/"], "word badges measured on the overview")
}

// readableJS measures what a reader must be able to read: each shown
// chart's title in CSS pixels (an SVG's words shrink with its drawing),
// and each overview figure's word badge, which must keep to one line.
// It returns the titles under 9 px, the badges that wrap, and how many of
// each it measured.
const readableJS = `() => {
	const small = [], wrapped = [];
	let titles = 0, badges = 0;
	for (const t of document.querySelectorAll("svg.chart text.title")) {
		const svg = t.ownerSVGElement, r = svg.getBoundingClientRect();
		if (r.width === 0) continue; // the drawing for the other width
		titles++;
		const px = parseFloat(t.getAttribute("font-size")) * r.width / svg.viewBox.baseVal.width;
		if (px < 9) small.push((svg.getAttribute("data-testid") || "") + " " + px.toFixed(1) + " px");
	}
	for (const b of document.querySelectorAll(".stat .value .badge")) {
		badges++;
		const cs = getComputedStyle(b);
		const line = parseFloat(cs.lineHeight) || parseFloat(cs.fontSize) * 1.3;
		const pad = parseFloat(cs.paddingTop) + parseFloat(cs.paddingBottom);
		if (b.getBoundingClientRect().height > line * 1.5 + pad) wrapped.push(b.textContent.trim());
	}
	return [small.join("; "), wrapped.join("; "), titles, badges];
}`
