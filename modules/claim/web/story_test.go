package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/tenant"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// namedAgent creates an agent of the tenant with its own account.
func namedAgent(t *testing.T, c *paneltest.Console, tn tenant.Tenant, name string) string {
	t.Helper()
	ctx := context.Background()
	acct, err := c.Fleet.CreateAccount(ctx, tn.ID, fleet.AccountInput{Key: "acct-" + name, BoardURL: "http://127.0.0.1:9", Client: tn.Slug,
		Username: "dispatch-" + name, Password: "Board-Password-1", TOTPSecret: "JBSWY3DPEHPK3PXP"}, paneltest.By)
	require.NoError(t, err)
	id, _, err := c.Fleet.CreateAgent(ctx, tn.ID, acct, name, paneltest.By)
	require.NoError(t, err)
	return id
}

// play runs one load through the engine's own paths: lease, fenced act,
// the actor's outcome.
func play(t *testing.T, c *paneltest.Console, tn tenant.Tenant, h claim.Holder, key, result, detail string) int64 {
	t.Helper()
	ctx := context.Background()
	c.Job(t, tn, key, 235000)
	lr := c.Claims.Lease(ctx, tn.ID, h, wire.LeaseRequest{RequestID: "l-" + key, Worker: h.Worker, Key: key})
	require.True(t, lr.Granted, lr.Reason)
	require.True(t, c.Claims.Act(ctx, tn.ID, h, wire.ActRequest{RequestID: "a-" + key, Worker: h.Worker, Key: key, Token: lr.Token}).OK)
	sent := time.Now()
	ok := sent.Add(120 * time.Millisecond)
	require.True(t, c.Claims.Outcome(ctx, tn.ID, h, wire.Outcome{RequestID: "o-" + key, Worker: h.Worker, Key: key, Token: lr.Token,
		Result: result, SentAt: &sent, ConfirmedAt: &ok, Detail: detail}, claim.Offset{}).OK)
	return lr.Token
}

// TestClaimStory: two agents that each run an "actor-1" are told apart on
// the claims page; a row opens the load's story, which lists the lease,
// the attempt, the six timestamps and the board's verdict of a claim made
// through the engine, and for a load lost to another client says plainly
// that the margin is not known; the worker filter takes agent/worker; the
// win rate counts booked ÷ contested; an unknown load is 404.
func TestClaimStory(t *testing.T) {
	c := paneltest.New(t)
	alpha := c.Tenant(t, "alpha")
	const pw = "correct horse battery"
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, alpha)
	oc := paneltest.Browserless()
	c.Enrolled(t, oc, "op@fleet.test", pw)
	_, err := c.Claims.PutFilter(context.Background(), paneltest.By, alpha.ID, claim.Filter{Name: "everything", Enabled: true})
	require.NoError(t, err)
	east, west := namedAgent(t, c, alpha, "east-1"), namedAgent(t, c, alpha, "west-1")
	lost := play(t, c, alpha, claim.Holder{Agent: east, Worker: "actor-1"}, "LD-700", wire.ResultTaken, "409: the load is taken")
	play(t, c, alpha, claim.Holder{Agent: west, Worker: "actor-1"}, "LD-701", wire.ResultConfirmed, "booked")
	base := c.Server.URL + "/t/alpha/claims"

	res, body := paneltest.Do(t, oc, "GET", base, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "east-1 · actor-1", paneltest.TestIDText(t, body, "worker-LD-700"))
	require.Equal(t, "west-1 · actor-1", paneltest.TestIDText(t, body, "worker-LD-701"))
	require.Contains(t, body, `href="/t/alpha/claims/load?key=LD-700" data-testid="story-LD-700"`)
	require.Equal(t, "50 %", paneltest.TestIDText(t, body, "win-rate-value"), "1 booked of 2 contested")
	require.Contains(t, body, "1 booked of 2 contested")
	require.Contains(t, body, "loads booked ÷ loads contested")

	_, body = paneltest.Do(t, oc, "GET", base+"?worker="+url.QueryEscape("east-1/actor-1"), nil)
	require.Contains(t, body, `data-testid="claim-LD-700"`)
	require.NotContains(t, body, `data-testid="claim-LD-701"`, "agent/worker names one worker")
	_, body = paneltest.Do(t, oc, "GET", base+"?worker=west-1", nil)
	require.NotContains(t, body, `data-testid="claim-LD-700"`)
	require.Contains(t, body, `data-testid="claim-LD-701"`)
	_, body = paneltest.Do(t, oc, "GET", base+"?worker=actor-1", nil)
	require.Contains(t, body, `data-testid="claim-LD-700"`)
	require.Contains(t, body, `data-testid="claim-LD-701"`)

	// The story of the lost load.
	res, body = paneltest.Do(t, oc, "GET", base+"/load?key=LD-700", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "TAKEN", paneltest.TestIDText(t, body, "verdict-state"))
	require.Contains(t, paneltest.TestIDText(t, body, "verdict-why"), "Lost: the board gave the load to another client. The actor&#39;s report: “409: the load is taken”.")
	margin := paneltest.TestIDText(t, body, "margin")
	require.Contains(t, margin, "Margin: not known")
	require.Contains(t, margin, "after the load was published")
	row := regexp.MustCompile(fmt.Sprintf(`(?s)data-testid="attempt-%d">(.*?)</tr>`, lost)).FindStringSubmatch(body)
	require.NotNil(t, row, "the attempt of the lease is listed")
	require.Contains(t, row[1], "east-1 · actor-1")
	require.Contains(t, row[1], "TAKEN")
	for _, s := range []string{"published_at", "seen_at", "queued_at", "leased_at", "act_sent_at", "confirmed_at"} {
		require.Contains(t, body, `data-testid="stamp-`+s+`"`)
	}
	sent := regexp.MustCompile(`(?s)data-testid="stamp-act_sent_at">.*?<td class="mono">([^<]*)</td>`).FindStringSubmatch(body)
	require.Regexp(t, `^\d\d:\d\d:\d\d\.\d{3}$`, strings.TrimSpace(sent[1]), "the act was sent at a time")
	tl := regexp.MustCompile(`(?s)data-testid="timeline">(.*?)</section>`).FindStringSubmatch(body)
	require.NotNil(t, tl)
	for _, s := range []string{"published on the board", "seen (first sighting", "queued in cell default", "lease granted",
		"action started", "booking request sent to the board", "outcome: TAKEN", "none → LEASED", "LEASED → ACTING", "ACTING → TAKEN",
		"409: the load is taken", "east-1 · actor-1"} {
		require.Contains(t, tl[1], s)
	}
	require.Less(t, strings.Index(tl[1], "lease granted"), strings.Index(tl[1], "booking request sent"), "oldest first")
	require.Less(t, strings.Index(tl[1], "booking request sent"), strings.Index(tl[1], "ACTING → TAKEN"))

	_, body = paneltest.Do(t, oc, "GET", base+"/load?key=LD-701", nil)
	require.Equal(t, "CONFIRMED", paneltest.TestIDText(t, body, "verdict-state"))
	require.Contains(t, paneltest.TestIDText(t, body, "verdict-why"), "Booked for this client by west-1 · actor-1")
	require.NotContains(t, body, `data-testid="margin"`, "only a lost load has a margin line")

	// A load whose outcome is unknown: the story says the reconciler
	// took it, from its queued job (an insert-only River client: the job
	// is queued, not worked).
	rc, err := river.NewClient(riverpgxv5.New(c.DB.App), &river.Config{})
	require.NoError(t, err)
	c.Claims.Store().SetEnqueuer(rc)
	play(t, c, alpha, claim.Holder{Agent: west, Worker: "actor-1"}, "LD-702", wire.ResultUnknown, "read timeout")
	_, body = paneltest.Do(t, oc, "GET", base+"/load?key=LD-702", nil)
	require.Equal(t, "UNKNOWN", paneltest.TestIDText(t, body, "verdict-state"))
	require.Contains(t, paneltest.TestIDText(t, body, "verdict-why"), "nothing is retried blind")
	tl = regexp.MustCompile(`(?s)data-testid="timeline">(.*?)</section>`).FindStringSubmatch(body)
	require.Contains(t, tl[1], "ACTING → UNKNOWN")
	require.Contains(t, tl[1], "reconciler queued", "the reconciler's job is part of the story")

	res, _ = paneltest.Do(t, oc, "GET", base+"/load?key=LD-NOPE", nil)
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	res, _ = paneltest.Do(t, oc, "GET", base+"/load", nil)
	require.Equal(t, http.StatusNotFound, res.StatusCode)

	// The latency page carries the win rate too.
	_, body = paneltest.Do(t, oc, "GET", base+"/latency", nil)
	require.Equal(t, "50 %", paneltest.TestIDText(t, body, "win-rate-value"))
	require.Contains(t, body, `data-testid="loss-margin"`)
}

// TestClaimsPaging: 60 claims make two pages of 50 and 10, with next and
// previous; the filter rides along; a time range picks by lease time and a
// bad one is said, not silently dropped.
func TestClaimsPaging(t *testing.T) {
	c := paneltest.New(t)
	acme := c.Tenant(t, "acme")
	const pw = "correct horse battery"
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, acme)
	oc := paneltest.Browserless()
	c.Enrolled(t, oc, "op@fleet.test", pw)
	traffic(t, c, acme, 60)
	base := c.Server.URL + "/t/acme/claims"
	rows := func(body string) int { return strings.Count(body, `class="linked"`) }

	_, body := paneltest.Do(t, oc, "GET", base, nil)
	require.Equal(t, 50, rows(body))
	require.Equal(t, "60", paneltest.TestIDText(t, body, "claim-count"))
	require.Equal(t, "1–50 of 60 · page 1 of 2", paneltest.TestIDText(t, body, "page-of"))
	require.NotContains(t, body, `data-testid="page-prev"`)
	next := regexp.MustCompile(`href="([^"]*)" data-testid="page-next"`).FindStringSubmatch(body)
	require.NotNil(t, next)
	require.Contains(t, body, `data-testid="claims-live"`, "the first page refreshes itself")

	_, body2 := paneltest.Do(t, oc, "GET", c.Server.URL+strings.ReplaceAll(next[1], "&amp;", "&"), nil)
	require.Equal(t, 10, rows(body2))
	require.Equal(t, "51–60 of 60 · page 2 of 2", paneltest.TestIDText(t, body2, "page-of"))
	require.Contains(t, body2, `data-testid="page-prev"`)
	require.NotContains(t, body2, `data-testid="page-next"`)
	require.NotContains(t, body2, `data-testid="claims-live"`, "a later page holds still")
	// No claim on both pages.
	keys := regexp.MustCompile(`data-testid="claim-(LD-\d+)"`)
	seen := map[string]bool{}
	for _, m := range keys.FindAllStringSubmatch(body, -1) {
		seen[m[1]] = true
	}
	for _, m := range keys.FindAllStringSubmatch(body2, -1) {
		require.False(t, seen[m[1]], "%s on both pages", m[1])
		seen[m[1]] = true
	}
	require.Len(t, seen, 60)

	// The state filter rides along with the pages.
	_, body = paneltest.Do(t, oc, "GET", base+"?state=TAKEN", nil)
	require.Less(t, rows(body), 50)
	require.NotContains(t, body, `data-testid="page-next"`)
	for _, m := range regexp.MustCompile(`<span class="badge[^"]*">([A-Z_]+)</span>`).FindAllStringSubmatch(body, -1) {
		require.Equal(t, "TAKEN", m[1])
	}

	// A time range: all of them leased in the last hour; none from the
	// next hour on.
	now := time.Now().UTC()
	_, body = paneltest.Do(t, oc, "GET", base+"?from="+now.Add(-time.Hour).Format("2006-01-02T15:04"), nil)
	require.Equal(t, "60", paneltest.TestIDText(t, body, "claim-count"))
	_, body = paneltest.Do(t, oc, "GET", base+"?from="+now.Add(time.Hour).Format("2006-01-02T15:04"), nil)
	require.Equal(t, "0", paneltest.TestIDText(t, body, "claim-count"))
	_, body = paneltest.Do(t, oc, "GET", base+"?to="+now.Add(-time.Hour).Format("2006-01-02T15:04")+"&window=2h", nil)
	require.Equal(t, "0", paneltest.TestIDText(t, body, "claim-count"))
	_, body = paneltest.Do(t, oc, "GET", base+"?from=yesterday", nil)
	require.Contains(t, paneltest.TestIDText(t, body, "error-filter"), `From &#34;yesterday&#34; is not a time`)
}
