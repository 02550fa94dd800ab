package crawl_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/board/catalog"
	"github.com/fleetwright/fleetwright/modules/crawl"
)

// TestRunAcrossReplicas: a run executed by a panel replica that holds no
// agent uses the agent connected to another live replica: its page tasks
// are relayed through Postgres, the proxy's credentials sealed by the vault
// on the way (they still reach the agent sealed to its key, and the proxy
// sees them right); every item is found once and no relay row is left.
func TestRunAcrossReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := newRig(t, ctx, nil)
	require.Len(t, r.b.CrawlAgents(r.tenant), 1, "replica b sees the agent that replica a holds")
	r.runner.Disp = r.b
	cat, port := startCatalog(t, catalog.Config{Hosts: []string{"127.0.0.28"}, Items: 60})
	const secret = "Relay-Pr0xy-Secret"
	px := startTestProxy(t, "relay", secret, false)
	require.NoError(t, r.svc.Store.SetEgress(ctx, r.tenant, ops, crawl.EgressPolicy{Allow: []string{fmt.Sprintf("127.0.0.0/8:%d", port)}}))
	_, err := r.svc.Store.SetPool(ctx, r.tenant, ops, crawl.PoolInput{Name: "relayed"})
	require.NoError(t, err)
	require.NoError(t, r.svc.Store.SetPoolAllow(ctx, r.tenant, ops, "relayed", []string{"127.0.0.1/32"}))
	_, err = r.svc.Store.AddProxy(ctx, r.tenant, ops, "relayed", crawl.ProxyInput{URL: px.URL(), Username: "relay", Password: secret})
	require.NoError(t, err)
	_, _, err = r.svc.Apply(ctx, r.tenant, ops, "cat.yaml", []byte(fmt.Sprintf(`version: 1
name: cat
start: {urls: ["http://127.0.0.28:%d/catalog?page=1"]}
allowed_domains: [127.0.0.28]
extract:
  items: li.product
  fields:
    url: {css: a.title, attr: href, transform: [absolute_url], required: true}
pagination: {next: {css: a.next}}
item_key: url
politeness: {delay: 10ms}
proxy_pool: relayed
`, port)))
	require.NoError(t, err)

	run := r.run(t, ctx, "cat")
	require.Equal(t, "succeeded", run.State, run.Reason)
	require.Equal(t, 60, run.Items)
	items, total, err := r.svc.Store.Items(ctx, r.tenant, run.JobID, crawl.ItemFilter{Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, 60, total)
	seen := map[string]int{}
	for _, it := range items {
		seen[fmt.Sprint(it.Data["url"])]++
	}
	for _, it := range cat.Published() {
		require.Equal(t, 1, seen[it.URL], it.URL)
	}
	_, connects, auths := px.seen()
	require.NotEmpty(t, connects)
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("relay:"+secret))
	for _, a := range auths {
		require.Equal(t, want, a)
	}
	var left int
	require.NoError(t, db.InTenant(ctx, r.d.App, r.tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM crawl_relay`).Scan(&left)
	}))
	require.Zero(t, left, "relayed tasks are removed once answered")
}
