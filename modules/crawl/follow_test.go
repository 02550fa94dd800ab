package crawl_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/board/catalog"
	"github.com/fleetwright/fleetwright/modules/crawl"
)

// TestFollowAppliesEachRuleSet: a job that follows links from listing
// pages to item pages extracts only the item pages with its extract rules.
// The listing pages have no canonical link (the item rules' required
// field), so extracting them with those rules counts one selector failure
// per listing page and opens the selector-failure alarm on a correct run.
// The run's items are all stored when it reports them.
func TestFollowAppliesEachRuleSet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newRig(t, ctx, nil)
	_, port := startCatalog(t, catalog.Config{Hosts: []string{"127.0.0.44"}, Items: 45, Rate: 1e6, Burst: 1e6})
	require.NoError(t, r.svc.Store.SetEgress(ctx, r.tenant, ops, crawl.EgressPolicy{Allow: []string{fmt.Sprintf("127.0.0.0/8:%d", port)}}))
	_, _, err := r.svc.Apply(ctx, r.tenant, ops, "items.yaml", []byte(fmt.Sprintf(`version: 1
name: items
start: {urls: ["http://127.0.0.44:%d/catalog?page=1"]}
allowed_domains: [127.0.0.44]
follow: {css: li.product a.title}
extract:
  fields:
    url: {css: "link[rel=canonical]", attr: href, required: true}
    title: {css: h1.name, transform: [trim]}
pagination: {next: {css: a.next}}
item_key: url
politeness: {concurrency: 4, delay: 0s, jitter: 0, autothrottle: false}
limits: {concurrency: 4}
`, port)))
	require.NoError(t, err)
	run := r.run(t, ctx, "items")
	require.Equal(t, "succeeded", run.State, run.Reason)
	require.Equal(t, 45+3, run.Pages, "3 listing pages and 45 item pages")
	require.Equal(t, 45, run.Items, "the item pages' items, none from the listings")
	require.Zero(t, run.SelectorFailures, "the item rules are not applied to listing pages")
	// Items are written off the run's loop, in batches; every one is
	// durable before the run reports it.
	require.Equal(t, 45, run.NewItems)
	j, err := r.svc.Store.JobByName(ctx, r.tenant, "items")
	require.NoError(t, err)
	stored, total, err := r.svc.Store.Items(ctx, r.tenant, j.ID, crawl.ItemFilter{RunID: run.ID, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 45, total)
	require.Len(t, stored, 45)
	open, err := alarm.ListTenant(ctx, r.d.App, r.tenant, true, 50)
	require.NoError(t, err)
	for _, a := range open {
		require.NotEqual(t, crawl.AlarmSelectorFailure, a.Kind, a.Summary)
	}
}
