package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

// TestAuditPageFiltersByTargetAndFoldsLongDetails: the audit log filters by
// a part of the target (any case), and a detail longer than a row's summary
// is folded behind it (the whole of it one click away), while a short one
// is shown as it is; times are said to be UTC.
func TestAuditPageFiltersByTargetAndFoldsLongDetails(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	acme := c.Tenant(t, "acme")
	const pw = "correct horse battery"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	long := map[string]any{"reason": strings.Repeat("a long explanation of why ", 8), "load": "LD-7"}
	require.NoError(t, db.InTenant(ctx, c.DB.App, acme.ID, func(tx pgx.Tx) error {
		if err := audit.Append(ctx, tx, audit.Entry{Actor: "ops@fleet.test", Action: "claim.review.approved", Target: "load LD-7", Detail: long}); err != nil {
			return err
		}
		return audit.Append(ctx, tx, audit.Entry{Actor: "ops@fleet.test", Action: "filter.created", Target: "filter Paying Loads",
			Detail: map[string]any{"min": 180}})
	}))

	cl := paneltest.Browserless()
	c.Enrolled(t, cl, "admin@fleet.test", pw)

	rows := func(q url.Values) *goquery.Selection {
		t.Helper()
		res, body := paneltest.Do(t, cl, "GET", c.Server.URL+"/audit?"+q.Encode(), nil)
		require.Equal(t, http.StatusOK, res.StatusCode)
		doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
		require.NoError(t, err)
		require.Contains(t, doc.Find(`[data-testid="audit"] thead`).Text(), "Time (UTC)")
		return doc.Find(`[data-testid="audit-row"]`)
	}

	got := rows(url.Values{"tenant": {"acme"}, "target": {"paying"}})
	require.Equal(t, 1, got.Length(), "only the filter's entry matches 'paying'")
	require.Equal(t, "filter.created", got.AttrOr("data-action", ""))
	require.Zero(t, got.Find(`[data-testid="audit-detail"]`).Length(), "a short detail is not folded")
	require.Contains(t, got.Find(".detail").Text(), "min: 180")

	got = rows(url.Values{"tenant": {"acme"}, "target": {"LD-7"}})
	require.Equal(t, 1, got.Length())
	fold := got.Find(`[data-testid="audit-detail"]`)
	require.Equal(t, 1, fold.Length(), "a long detail is folded")
	sum := fold.Find("summary").Text()
	require.Less(t, len(sum), 70, "the summary is short: %q", sum)
	require.True(t, strings.HasSuffix(sum, "…"), sum)
	require.Contains(t, fold.Text(), strings.Repeat("a long explanation of why ", 7), "the whole detail is inside the fold")

	require.Equal(t, 0, rows(url.Values{"tenant": {"acme"}, "target": {"nothing like it"}}).Length())
}
