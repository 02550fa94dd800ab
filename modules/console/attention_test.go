package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

var (
	itemRe  = regexp.MustCompile(`(?s)<a class="att ([a-z]+)" href="([^"]*)" data-testid="attention-item"[^>]*>(.*?)</a>`)
	tagRe   = regexp.MustCompile(`<[^>]+>`)
	titleRe = regexp.MustCompile(`<title>([^<]*)</title>`)
)

type line struct{ Severity, Href, Text string }

// strip reads the attention strip's lines out of a page.
func strip(t *testing.T, body string) []line {
	t.Helper()
	i := strings.Index(body, `data-testid="attention"`)
	require.GreaterOrEqual(t, i, 0, "the page has no attention strip")
	j := strings.Index(body[i:], "</section>")
	require.Greater(t, j, 0)
	var out []line
	for _, m := range itemRe.FindAllStringSubmatch(body[i:i+j], -1) {
		text := strings.Join(strings.Fields(tagRe.ReplaceAllString(m[3], " ")), " ")
		out = append(out, line{Severity: m[1], Href: strings.ReplaceAll(m[2], "&amp;", "&"), Text: strings.ReplaceAll(text, "&#39;", "'")})
	}
	return out
}

func find(t *testing.T, ls []line, part string) line {
	t.Helper()
	for _, l := range ls {
		if strings.Contains(l.Text, part) {
			return l
		}
	}
	require.Failf(t, "no such line in the attention strip", "%q not in %+v", part, ls)
	return line{}
}

// connect marks an agent connected through a live replica, as the gateway
// records it, with a state report.
func connect(t *testing.T, c *paneltest.Console, tn tenant.Tenant, agentID string, st wire.State) {
	t.Helper()
	ctx := context.Background()
	replica := "00000000-0000-4000-8000-0000000000f1"
	_, err := c.DB.App.Exec(ctx, `INSERT INTO panel_replicas (id, host, listen, version, pid, started_at, last_seen)
		VALUES ($1, 'h', 'l', 'v', 1, now(), now() + interval '1 hour') ON CONFLICT (id) DO NOTHING`, replica)
	require.NoError(t, err)
	require.NoError(t, db.InTenant(ctx, c.DB.App, tn.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET connected = true, replica_id = $2, last_seen = now() WHERE id = $1`, agentID, replica)
		return err
	}))
	require.NoError(t, c.Fleet.SaveState(ctx, fleet.Agent{ID: agentID, Tenant: tn.ID}, st))
}

// TestAttentionStripNamesWhatNeedsAPerson: with an agent offline for seven
// minutes, a hung watcher, two crawls that found nothing, a claim review
// and an assistant waiting for an approval, and a paused tenant, every page
// carries a strip that names each one in words, worst first, linked to a
// page that answers (anchors included); the tab's title carries the count;
// the strip's reload serves the same with the title; the overview's worker
// figure does not count the hung watcher as online. An operator of another
// tenant sees none of it.
func TestAttentionStripNamesWhatNeedsAPerson(t *testing.T) {
	c := paneltest.New(t)
	ctx := context.Background()
	const pw = "correct horse battery"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	acme, beta := c.Tenant(t, "acme"), c.Tenant(t, "beta")
	c.Grant(t, op, beta)
	admin, oper := paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, admin, "admin@fleet.test", pw)
	c.Enrolled(t, oper, "op@fleet.test", pw)

	// A healthy agent with a watcher that is hung, and one offline for 7 min.
	acct := factory.Account(t, c.Fleet, acme.ID, fleet.AccountInput{Key: "acct-1",
		Workers: []wire.WorkerSpec{{Name: "watcher-1", Kind: "watcher"}, {Name: "actor-1", Kind: "http_actor"}}})
	live, _ := factory.Agent(t, c.Fleet, acme.ID, acct, "north-1")
	connect(t, c, acme, live, wire.State{Workers: []wire.WorkerState{{Name: "watcher-1", Kind: "watcher", State: wire.WorkerRunning},
		{Name: "actor-1", Kind: "http_actor", State: wire.WorkerRunning}}})
	acct2 := factory.Account(t, c.Fleet, acme.ID, fleet.AccountInput{Key: "acct-2", Workers: []wire.WorkerSpec{{Name: "actor-1", Kind: "http_actor"}}})
	frozen, _ := factory.Agent(t, c.Fleet, acme.ID, acct2, "south-2")
	require.NoError(t, db.InTenant(ctx, c.DB.App, acme.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE agents SET connected = false, last_seen = now() - interval '7 minutes 10 seconds' WHERE id = $1`, frozen)
		return err
	}))
	_, err := alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "worker.hung", Key: live + "/watcher-1", Tenant: acme.ID, Severity: alarm.Critical,
		Summary: "watcher-1 on north-1 is hung: alive with work, nothing completed for 2 min", Link: "/t/acme/fleet"})
	require.NoError(t, err)
	for _, job := range []string{"j1", "j2"} {
		_, err = alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "crawl.zero_results", Key: job, Tenant: acme.ID, Severity: alarm.Warning,
			Summary: "crawl " + job + " found no item"})
		require.NoError(t, err)
	}
	// The offline agent's own alarm (the health sweep's) adds no second
	// line for it; a third crawl's alarm, silenced, is counted nowhere.
	_, err = alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "agent.offline", Key: frozen, Tenant: acme.ID, Severity: alarm.Critical,
		Summary: "offline: not heard from since 10:00:00 UTC"})
	require.NoError(t, err)
	_, err = alarm.Raise(ctx, c.DB.App, alarm.Alarm{Kind: "crawl.zero_results", Key: "j3", Tenant: acme.ID, Severity: alarm.Warning,
		Summary: "crawl j3 found no item"})
	require.NoError(t, err)
	require.NoError(t, db.InTenant(ctx, c.DB.App, acme.ID, func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, `SELECT id FROM alarms WHERE kind = 'crawl.zero_results' AND key = 'j3'`).Scan(&id); err != nil {
			return err
		}
		_, err := alarm.Silence(ctx, tx, id, time.Hour, "op@fleet.test", time.Now())
		return err
	}))
	// A load above the review threshold waits for a person.
	require.NoError(t, c.Claims.Store().SetLimits(ctx, paneltest.By, acme.ID, claim.Limits{ReviewAboveCents: ptr(int64(500000))}))
	_, err = c.Claims.PutFilter(ctx, paneltest.By, acme.ID, claim.Filter{Name: "everything", Enabled: true})
	require.NoError(t, err)
	c.Job(t, acme, "LD-90001", 780000)
	lr := c.Claims.Lease(ctx, acme.ID, claim.Holder{Agent: live, Worker: "actor-1"}, wire.LeaseRequest{RequestID: "r", Worker: "actor-1", Key: "LD-90001"})
	require.Equal(t, wire.ReasonReview, lr.Reason)
	// An enrolled assistant holds a task for its person's approval.
	acct3 := factory.Account(t, c.Fleet, acme.ID, fleet.AccountInput{Key: "acct-3", Workers: []wire.WorkerSpec{{Name: "assistant-1", Kind: "assistant"}}})
	helper, _ := factory.Agent(t, c.Fleet, acme.ID, acct3, "desk-3")
	connect(t, c, acme, helper, wire.State{})
	require.NoError(t, c.Fleet.SaveAssistantReport(ctx, fleet.Agent{ID: helper, Tenant: acme.ID}, wire.AssistantReport{Model: "ollama qwen",
		Tasks: []wire.AssistantTask{{ID: 1, Goal: "post the weekly note", Status: "awaiting_approval", PendingApproval: "Publish to the Demo Studio page?", UpdatedAt: time.Now()}}}))
	require.NoError(t, c.Claims.Store().SetPaused(ctx, paneltest.By, acme.ID, true))

	for _, path := range []string{"/", "/alarms", "/t/acme/fleet", "/t/acme/claims", "/audit"} {
		res, body := paneltest.Do(t, admin, "GET", c.Server.URL+path, nil)
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		ls := strip(t, body)
		off := find(t, ls, "Agent south-2 is offline for 7 min")
		require.Equal(t, "bad", off.Severity)
		require.Equal(t, "/t/acme/fleet", off.Href)
		hung := find(t, ls, "Worker hung: watcher-1 on north-1 is hung")
		require.Equal(t, "bad", hung.Severity)
		crawl := find(t, ls, "2 crawls found no items")
		require.Equal(t, "warn", crawl.Severity)
		require.Equal(t, "/alarms?kind=crawl.zero_results&tenant=acme", crawl.Href)
		rev := find(t, ls, "1 load(s) wait for your review")
		require.Equal(t, "/t/acme/claims/settings#reviews", rev.Href)
		appr := find(t, ls, "Assistant desk-3 waits for your approval: Publish to the Demo Studio page?")
		require.Equal(t, "/t/acme/fleet#assistant-"+helper, appr.Href)
		find(t, ls, "Claims are paused")
		named := 0
		for _, l := range ls {
			if strings.Contains(l.Text, "south-2") || strings.Contains(strings.ToLower(l.Text), "agent offline") {
				named++
			}
		}
		require.Equal(t, 1, named, "the offline agent has one line, its alarm none of its own: %+v", ls)
		require.NotContains(t, body, `data-testid="attention-clear"`)
		// Worst first: every bad line before every warn line.
		seenWarn := false
		for _, l := range ls {
			if l.Severity == "warn" {
				seenWarn = true
			}
			require.False(t, seenWarn && l.Severity == "bad", "a bad line after a warning: %+v", ls)
		}
		// The tab's title leads with the count.
		title := titleRe.FindStringSubmatch(body)
		require.NotNil(t, title)
		require.True(t, strings.HasPrefix(title[1], "("+strconv.Itoa(len(ls))+") "), "title %q with %d lines", title[1], len(ls))
		require.Contains(t, body, `hx-get="/attention?`)
		if path != "/" {
			continue
		}
		// Every line leads to a page that answers, its anchor included.
		for _, l := range ls {
			u, err := url.Parse(l.Href)
			require.NoError(t, err)
			frag := u.Fragment
			u.Fragment = ""
			res, page := paneltest.Do(t, admin, "GET", c.Server.URL+u.String(), nil)
			require.Equal(t, http.StatusOK, res.StatusCode, l.Href)
			if frag != "" {
				require.Contains(t, page, `id="`+frag+`"`, "anchor of %s", l.Href)
			}
		}
		// The hung watcher does not count as online; the overview says so.
		require.Equal(t, "1 / 4", paneltest.TestIDText(t, body, "workers"))
		require.Equal(t, "1 hung or out of restarts", paneltest.TestIDText(t, body, "workers-hung"))
		require.Equal(t, "1 claim review(s)", paneltest.TestIDText(t, body, "claim-reviews"))
		require.Equal(t, "1 assistant approval(s)", paneltest.TestIDText(t, body, "assistant-approvals"))
		require.Equal(t, "2", paneltest.TestIDText(t, body, "reviews"))
		require.Contains(t, body, `data-testid="alarms-crawl.zero_results">2 crawls found no items <code class="kind">crawl.zero_results</code>`)
		require.Equal(t, "4", paneltest.TestIDText(t, body, "alarms-open"), "open and not silenced: the hung watcher, two crawls, the offline agent")
		require.Equal(t, "1 more silenced", paneltest.TestIDText(t, body, "alarms-silenced"))
	}

	// The strip's reload: the same lines and the title for htmx to set.
	res, frag := paneltest.Do(t, admin, "GET", c.Server.URL+"/attention?title=Alarms", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, frag, "<html")
	n := len(strip(t, frag))
	require.GreaterOrEqual(t, n, 6)
	require.Contains(t, frag, "<title>("+strconv.Itoa(n)+") Alarms · Fleetwright</title>")

	// Connected again but its alarm still open (heard from, not yet swept):
	// the alarm's line names it now.
	connect(t, c, acme, frozen, wire.State{})
	_, body := paneltest.Do(t, admin, "GET", c.Server.URL+"/", nil)
	find(t, strip(t, body), "Agent offline (not heard from): offline: not heard from since 10:00:00 UTC")
	// Put right, lines go: the sweep resolves its alarm, the hung one is resolved.
	_, err = alarm.Resolve(ctx, c.DB.App, acme.ID, "agent.offline", frozen, "health sweep")
	require.NoError(t, err)
	_, err = alarm.Resolve(ctx, c.DB.App, acme.ID, "worker.hung", live+"/watcher-1", "test")
	require.NoError(t, err)
	_, body = paneltest.Do(t, admin, "GET", c.Server.URL+"/", nil)
	ls := strip(t, body)
	require.Len(t, ls, n-2, "%+v", ls)
	require.Equal(t, "2 / 4", paneltest.TestIDText(t, body, "workers"))

	// The operator of beta sees nothing of acme, and the overview says all is clear.
	_, body = paneltest.Do(t, oper, "GET", c.Server.URL+"/", nil)
	require.Empty(t, strip(t, body))
	require.Contains(t, body, `data-testid="attention-clear"`)
	require.NotContains(t, body, "south-2")
	require.Contains(t, body, "<title>Overview · Fleetwright</title>")
	_, body = paneltest.Do(t, oper, "GET", c.Server.URL+"/t/beta/fleet", nil)
	require.Empty(t, strip(t, body))
	require.NotContains(t, body, `data-testid="attention-clear"`)
}

func ptr[T any](v T) *T { return &v }
