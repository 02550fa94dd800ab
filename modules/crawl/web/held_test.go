package web

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/views"
)

// TestPagesShowTheHold: while a pause switch holds the tenant's crawl
// work, the jobs page and the job page say so and which switch, and a run
// it holds carries a held badge; with the switch off neither shows.
func TestPagesShowTheHold(t *testing.T) {
	ctx := context.Background()
	since := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	job := crawl.Job{ID: "j1", Name: "shop", Version: 1, Spec: &spec.Job{}}
	run := crawl.Run{ID: "r1", JobID: "j1", State: "running", QueuedAt: since, StartedAt: &since, HeldSince: &since, HeldReason: crawl.HeldFleet}

	var b strings.Builder
	require.NoError(t, JobPage(views.Page{Title: "Crawl"}, jobModel{Slug: "acme", Job: job, Runs: []RunRow{{Run: run}}, Held: crawl.HeldFleet}).Render(ctx, &b))
	html := b.String()
	require.Contains(t, html, `data-testid="crawl-held"`)
	require.Contains(t, html, "Crawling is held: "+crawl.HeldFleet)
	require.Contains(t, html, `data-testid="run-held-r1"`)
	require.Contains(t, html, "held: "+crawl.HeldFleet)

	b.Reset()
	require.NoError(t, JobsPage(views.Page{Title: "Crawl"}, jobsModel{Slug: "acme", Rows: []JobRow{{Job: job, Last: &run}}, Held: crawl.HeldTenant}).Render(ctx, &b))
	require.Contains(t, b.String(), "Crawling is held: "+crawl.HeldTenant)

	run.HeldSince, run.HeldReason = nil, ""
	b.Reset()
	require.NoError(t, JobPage(views.Page{Title: "Crawl"}, jobModel{Slug: "acme", Job: job, Runs: []RunRow{{Run: run}}}).Render(ctx, &b))
	require.NotContains(t, b.String(), "crawl-held")
	require.NotContains(t, b.String(), "run-held-")
}
