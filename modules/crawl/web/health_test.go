package web_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestCrawlHealthIsOneTruth: a run that "succeeded" with no item where
// items were expected is shown amber in words (on the job list and the
// runs table), never as a green success; the job list names the job's
// open alarm, raised by the crawler's own rules, and links to it; the
// items chart has a time axis and its expected band; bytes and durations
// carry units.
func TestCrawlHealthIsOneTruth(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	a := c.Tenant(t, "alpha")
	const pw = "correct horse battery"
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, a)
	cl := paneltest.Browserless()
	c.Enrolled(t, cl, "op@fleet.test", pw)

	src, err := os.ReadFile("../../../examples/crawl/catalogue-http.yaml")
	require.NoError(t, err)
	res, _ := paneltest.Do(t, cl, "POST", c.Server.URL+"/t/alpha/crawl/jobs", url.Values{"source": {string(src)}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	jobPath := res.Header.Get("Location")
	st := crawl.NewStore(c.DB.App, spec.Options{})
	job, err := st.JobByName(ctx, a.ID, "catalogue-http")
	require.NoError(t, err)

	// Two good runs, then one that fetched its pages and found nothing.
	start := time.Now().Add(-3 * time.Hour)
	var runs []crawl.Run
	for i, items := range []int{900, 905, 0} {
		var id string
		q := start.Add(time.Duration(i) * time.Hour)
		require.NoError(t, db.InTenant(ctx, c.DB.App, a.ID, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `INSERT INTO crawl_runs (tenant_id, job_id, version, state, reason, queued_at, started_at, finished_at, pages, items, bytes)
				VALUES (app_tenant(), $1, 1, 'succeeded', 'done', $2::timestamptz, $2::timestamptz, $2::timestamptz + interval '2 minutes 5 seconds', 45, $3, 3250000) RETURNING id`, job.ID, q, items).Scan(&id)
		}))
		all, err := st.Runs(ctx, a.ID, job.ID, 1)
		require.NoError(t, err)
		require.Equal(t, id, all[0].ID)
		runs = append(runs, all[0])
	}
	// The crawler's own rules judge the last run: the zero-result alarm.
	rules := &crawl.Rules{Store: st, Log: slog.New(slog.DiscardHandler)}
	rules.OnFinish(ctx, a.ID, job, runs[2], map[string]any{"url": "http://127.0.0.1:9/catalog", "status": 200})

	res, body := paneltest.Do(t, cl, "GET", c.Server.URL+"/t/alpha/crawl", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	last := regexp.MustCompile(`<span class="([^"]*)"[^>]*data-testid="last-run-catalogue-http">([^<]*)<`).FindStringSubmatch(body)
	require.NotNil(t, last, "the job list shows the last run")
	require.Equal(t, "badge warn", last[1], "a zero-item run is amber, not green")
	require.Equal(t, "succeeded — 0 items, expected 850–950", last[2])
	cell := regexp.MustCompile(`(?s)data-testid="job-alarms-catalogue-http">(.*?)</td>`).FindStringSubmatch(body)
	require.NotNil(t, cell)
	require.Contains(t, cell[1], `href="/alarms?tenant=alpha&amp;kind=crawl.zero_results"`)
	require.Contains(t, cell[1], "crawl found no items", "the open alarm in words")
	require.Contains(t, cell[1], `class="badge bad"`, "critical")

	res, body = paneltest.Do(t, cl, "GET", c.Server.URL+jobPath, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	zero := regexp.MustCompile(`<span class="([^"]*)"[^>]*data-testid="run-state-` + runs[2].ID + `">([^<]*)<`).FindStringSubmatch(body)
	require.NotNil(t, zero)
	require.Equal(t, "badge warn", zero[1])
	require.Contains(t, zero[2], "0 items, expected 850–950")
	good := regexp.MustCompile(`<span class="([^"]*)"[^>]*data-testid="run-state-` + runs[1].ID + `">([^<]*)<`).FindStringSubmatch(body)
	require.Equal(t, []string{"badge ok", "succeeded"}, good[1:], "a run with items stays a plain success")
	require.Contains(t, body, `data-testid="expected-band"`)
	ticks := regexp.MustCompile(`data-testid="x-tick">([^<]*)<`).FindAllStringSubmatch(body, -1)
	require.GreaterOrEqual(t, len(ticks), 2, "the chart has a time axis")
	require.Equal(t, start.UTC().Format("15:04"), ticks[0][1], "the axis starts at the first run")
	require.Contains(t, body, "run queued (UTC)")
	require.Contains(t, body, "expected 850–950 items")
	require.Contains(t, body, ">3.1 MiB<", "bytes with their unit")
	require.Contains(t, body, ">2 min 05 s<", "durations with their unit")
	require.NotContains(t, body, ">3250000<")
	require.False(t, strings.Contains(body, "2m5s"))
}
