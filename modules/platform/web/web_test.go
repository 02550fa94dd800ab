package web_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
	"github.com/fleetwright/fleetwright/modules/platform/registry"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestPlatformPage walks the page as an admin and an operator: the
// built-in sandbox first; an upload asks first, then stores version 1
// (audited); moving the account asks, then holds it (the review gate,
// shown with its reason); a check against the account's real board shows
// per field what each rule extracted beside the spec (audited, no
// secret on the page); a review without a reference is refused, one with
// it asks, then lifts the hold (audited); a second upload's diff is shown;
// an operator sees the page but none of the admin's forms, and is refused
// their routes.
func TestPlatformPage(t *testing.T) {
	ctx := context.Background()
	c := paneltest.New(t)
	acme := c.Tenant(t, "acme")
	const pw = "Quiet-Harbour-Lantern-42"
	c.User(t, "admin@fleet.test", auth.Admin, pw)
	op := c.User(t, "op@fleet.test", auth.Operator, pw)
	c.Grant(t, op, acme)
	ac, oc := paneltest.Browserless(), paneltest.Browserless()
	c.Enrolled(t, ac, "admin@fleet.test", pw)
	c.Enrolled(t, oc, "op@fleet.test", pw)

	bd := boardtest.Start(t)
	const boardPW = "Board-Password-Nine-9"
	ba, err := bd.CreateAccount(ctx, board.AccountSpec{Username: "dispatch-1", Password: boardPW, Client: "acme"})
	require.NoError(t, err)
	loads, err := bd.Publish(ctx, 1, nil)
	require.NoError(t, err)
	acct, err := c.Fleet.CreateAccount(ctx, acme.ID, fleet.AccountInput{Key: "acct-1", BoardURL: bd.URL(), Client: "acme",
		Username: "dispatch-1", Password: boardPW, TOTPSecret: ba.TOTPSecret}, paneltest.By)
	require.NoError(t, err)

	page := c.Server.URL + "/t/acme/settings/platform"
	res, body := paneltest.Do(t, ac, "GET", page, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "sandbox (built in)")
	require.Contains(t, body, `data-testid="spec-source"`)
	require.Contains(t, body, "shipped sandbox")
	require.Contains(t, body, `href="/t/acme/settings/platform"`, "the tenant's tabs link the page")

	src, err := os.ReadFile("../../../examples/platforms/sandbox.yaml")
	require.NoError(t, err)
	real := strings.Replace(string(src), "name: sandbox", "name: acme-board", 1)

	// A bad spec is refused with its line, nothing stored.
	res, body = paneltest.Do(t, ac, "POST", page+"/apply", url.Values{"source": {strings.Replace(real, "version: 1", "version: 4", 1)}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="upload-errors"`)
	require.Contains(t, body, "line 4:")
	// The upload asks first.
	res, body = paneltest.Do(t, ac, "POST", page+"/apply", url.Values{"source": {real}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "Store this spec for platform acme-board?")
	require.Contains(t, body, "accounts on it claim nothing until an admin records the platform")
	require.Empty(t, c.Audited(t, acme.ID, registry.ActionApply), "asking stores nothing")
	res, _ = paneltest.Do(t, ac, "POST", page+"/apply", url.Values{"source": {real}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Len(t, c.Audited(t, acme.ID, registry.ActionApply), 1)
	st := registry.New(c.DB.App)
	p, err := st.ByName(ctx, acme.ID, "acme-board")
	require.NoError(t, err)

	// Moving the account asks, then holds it.
	move := url.Values{"account": {acct}, "target": {p.ID + ":1"}}
	res, body = paneltest.Do(t, ac, "POST", page+"/account", move)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "Move account acct-1 to acme-board version 1?")
	move.Set("confirm", "yes")
	res, _ = paneltest.Do(t, ac, "POST", page+"/account", move)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Len(t, c.Audited(t, acme.ID, registry.ActionAccount), 1)
	res, body = paneltest.Do(t, ac, "GET", page+"?p=acme-board", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="review-gate"`)
	require.Contains(t, body, `data-testid="held-acct-1"`)
	require.Contains(t, body, "has no recorded review")
	require.Contains(t, body, `data-testid="review-none"`)
	res, body = paneltest.Do(t, ac, "GET", c.Server.URL+"/t/acme/fleet/accounts", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, paneltest.TestIDText(t, body, "platform-acct-1"), "platform")
	require.Contains(t, body, "held: no review", "the account's own row says it is held")

	// The check, against the account's board, beside the spec.
	res, body = paneltest.Do(t, oc, "POST", page+"/check", url.Values{"p": {"acme-board"}, "v": {"1"}, "account": {acct}})
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Equal(t, "passed", paneltest.TestIDText(t, body, "check-verdict"))
	require.Contains(t, body, `data-testid="spec-source"`, "the spec is beside the result")
	require.Contains(t, body, loads[0].ID, "the key the feed's rule extracted")
	require.Contains(t, body, "path id, required")
	require.NotContains(t, body, boardPW)
	require.NotContains(t, body, ba.TOTPSecret)
	require.Empty(t, bd.Bookings("acme"), "the check booked nothing")
	checks := c.Audited(t, acme.ID, registry.ActionCheck)
	require.Len(t, checks, 1)
	require.Equal(t, "op@fleet.test", checks[0].Actor)
	require.NotContains(t, checks[0].Detail, boardPW)
	res, body = paneltest.Do(t, oc, "POST", page+"/check", url.Values{"p": {"acme-board"}, "account": {"00000000-0000-4000-8000-000000000001"}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="check-error"`)

	// The review: refused without a reference; asks; then lifts the hold.
	res, body = paneltest.Do(t, ac, "POST", page+"/review", url.Values{"p": {"acme-board"}, "reference": {" "}})
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode)
	require.Contains(t, body, `data-testid="review-error"`)
	review := url.Values{"p": {"acme-board"}, "reference": {"Counsel's letter LG-88, 2026-11-30"}}
	res, body = paneltest.Do(t, ac, "POST", page+"/review", review)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "Record the review of acme-board for Acme Freight?")
	require.Empty(t, c.Audited(t, acme.ID, registry.ActionReviewRecord))
	review.Set("confirm", "yes")
	res, _ = paneltest.Do(t, ac, "POST", page+"/review", review)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	rec := c.Audited(t, acme.ID, registry.ActionReviewRecord)
	require.Len(t, rec, 1)
	require.Equal(t, "admin@fleet.test", rec[0].Actor)
	require.Contains(t, rec[0].Detail, "LG-88")
	res, body = paneltest.Do(t, ac, "GET", page+"?p=acme-board", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, body, `data-testid="review-gate"`)
	require.Contains(t, body, `data-testid="review-in-force"`)
	require.Contains(t, body, "Counsel&#39;s letter LG-88")
	_, body = paneltest.Do(t, ac, "GET", c.Server.URL+"/t/acme/fleet/accounts", nil)
	require.NotContains(t, body, "held: no review")

	// A second version and its diff.
	res, _ = paneltest.Do(t, ac, "POST", page+"/apply", url.Values{"source": {strings.Replace(real, "poll_interval: 1s", "poll_interval: 5s", 1)}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, body = paneltest.Do(t, ac, "GET", page+"?p=acme-board&v=2&diff=2", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `data-testid="version-diff"`)
	require.Regexp(t, `class="diff-del">- \s*poll_interval: 1s<`, body)
	require.Regexp(t, `class="diff-add">\+ \s*poll_interval: 5s<`, body)
	a, err := st.AccountByID(ctx, acme.ID, acct)
	require.NoError(t, err)
	require.Equal(t, 1, a.Version, "a new version moves no account")

	// ?p= is the built-in sandbox, whatever the tenant stored.
	_, body = paneltest.Do(t, ac, "GET", page+"?p=", nil)
	require.Contains(t, body, "examples/platforms/sandbox.yaml, built into the agent")
	_, body = paneltest.Do(t, ac, "GET", page, nil)
	require.Contains(t, body, `<strong>acme-board</strong>`, "without a choice, the first platform")

	// The operator sees the page, not the admin's forms, and is refused them.
	res, body = paneltest.Do(t, oc, "GET", page+"?p=acme-board", nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, body, `data-testid="upload"`)
	require.NotContains(t, body, `data-testid="record-review"`)
	require.NotContains(t, body, `data-testid="move-acct-1"`)
	require.Contains(t, body, `data-testid="run-check"`)
	for _, path := range []string{"/apply", "/account", "/review", "/review/withdraw"} {
		res, _ = paneltest.Do(t, oc, "POST", page+path, url.Values{"p": {"acme-board"}, "confirm": {"yes"}})
		require.Equal(t, http.StatusForbidden, res.StatusCode, path)
	}

	// Withdrawing asks, then holds the account again.
	res, body = paneltest.Do(t, ac, "POST", page+"/review/withdraw", url.Values{"p": {"acme-board"}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, "Withdraw the review of acme-board?")
	res, _ = paneltest.Do(t, ac, "POST", page+"/review/withdraw", url.Values{"p": {"acme-board"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	a, _ = st.AccountByID(ctx, acme.ID, acct)
	require.NotEmpty(t, a.Held)
	require.NotContains(t, c.Logs.String(), boardPW, "no secret reached the log")
}
