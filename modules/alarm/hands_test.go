package alarm_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/auth"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

var titleRe = regexp.MustCompile(`<title>([^<]*)</title>`)

// TestAcknowledgeSilenceResolve: an operator acknowledges an alarm (the
// page then says who and when), silences it for 15 minutes (it leaves the
// attention strip and the tab's title, shows "silenced until", is filtered
// by state, and a re-raise of the same condition after it resolved stays
// silenced and is not written for the channels), the silence ends on the
// console's clock (it counts again), and resolves it; each step is
// audited.
func TestAcknowledgeSilenceResolve(t *testing.T) {
	clk := clock.NewFake(time.Now())
	c := paneltest.NewClock(t, nil, clk)
	ctx := context.Background()
	acme := c.Tenant(t, "acme")
	const email, pw = "operator@fleet.test", "Quiet-Harbour-Lantern-42"
	op := c.User(t, email, auth.Operator, pw)
	c.Grant(t, op, acme)
	cl := paneltest.Browserless()
	c.Enrolled(t, cl, email, pw)

	hung := alarm.Alarm{Kind: "worker.hung", Key: "agent-1/watcher-1", Tenant: acme.ID, Severity: alarm.Critical,
		Summary: "watcher-1 on agent-1 is hung", Link: "/t/acme/fleet", At: clk.Now()}
	_, err := alarm.Raise(ctx, c.DB.App, hung)
	require.NoError(t, err)
	idOf := func() int64 {
		list, err := alarm.ListTenant(ctx, c.DB.App, acme.ID, true, 0)
		require.NoError(t, err)
		require.Len(t, list, 1)
		return list[0].ID
	}
	id := idOf()
	counted := func() (int, string) {
		t.Helper()
		_, body := paneltest.Do(t, cl, "GET", c.Server.URL+"/", nil)
		return strings.Count(body, `data-testid="attention-item"`), titleRe.FindStringSubmatch(body)[1]
	}
	n, title := counted()
	require.Equal(t, 1, n)
	require.Equal(t, "(1) Overview · Fleetwright", title)
	// A viewer has no hands on them.
	const vEmail = "viewer@fleet.test"
	v := c.User(t, vEmail, auth.Viewer, pw)
	c.Grant(t, v, acme)
	vc := paneltest.Browserless()
	c.Enrolled(t, vc, vEmail, pw)
	res, _ := paneltest.Do(t, vc, "POST", c.Server.URL+"/t/acme/alarms/"+itoa(id)+"/acknowledge", nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	base := c.Server.URL + "/t/acme/alarms/" + itoa(id)
	row := func(state string) string {
		t.Helper()
		_, body := paneltest.Do(t, cl, "GET", c.Server.URL+"/alarms?state="+state, nil)
		i := strings.Index(body, `data-testid="alarm-worker.hung-agent-1/watcher-1"`)
		if i < 0 {
			return ""
		}
		return body[i : i+strings.Index(body[i:], "</tr>")]
	}

	// Acknowledge: who and when, on the row; still counted (someone is on
	// it, it is not put right yet).
	res, _ = paneltest.Do(t, cl, "POST", base+"/acknowledge", url.Values{"back": {"/alarms?state=acknowledged"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/alarms?state=acknowledged", res.Header.Get("Location"))
	r := row("acknowledged")
	require.Contains(t, r, "acknowledged by "+email+" at "+clk.Now().UTC().Format("15:04 UTC"))
	require.Contains(t, r, `data-testid="silence"`)
	require.NotContains(t, r, `data-testid="acknowledge"`, "acknowledged once")
	require.Empty(t, row("silenced"))
	n, _ = counted()
	require.Equal(t, 1, n)
	require.Len(t, c.Audited(t, acme.ID, "alarm.acknowledge"), 1)

	// A duration not offered is refused, nothing silenced.
	res, _ = paneltest.Do(t, cl, "POST", base+"/silence", url.Values{"for": {"876000h"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Empty(t, row("silenced"))

	// Silence for 15 minutes: out of the strip and the title, shown as such.
	res, _ = paneltest.Do(t, cl, "POST", base+"/silence", url.Values{"for": {"15m0s"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	end := clk.Now().Add(15 * time.Minute)
	r = row("silenced")
	require.Contains(t, r, "until "+end.UTC().Format("15:04 UTC")+" (in 15 min)")
	require.Contains(t, r, "by "+email)
	require.Contains(t, r, `data-testid="unsilence"`)
	require.NotEmpty(t, row("open"), "a silenced alarm is still open")
	n, title = counted()
	require.Equal(t, 0, n, "a silenced alarm is not counted")
	require.Equal(t, "Overview · Fleetwright", title)
	audits := c.Audited(t, acme.ID, "alarm.silence")
	require.Len(t, audits, 1)
	require.Contains(t, audits[0].Detail, `"for": "15m0s"`)

	// The condition clears and comes back within the silence: a new
	// alarm, silenced too, and nothing written for the channels.
	events := func() int {
		var k int
		require.NoError(t, db.TenantRow(ctx, c.DB.App, acme.ID, `SELECT count(*) FROM alarm_events`).Scan(&k))
		return k
	}
	before := events()
	clk.Advance(5 * time.Minute)
	_, err = alarm.ResolveAt(ctx, c.DB.App, acme.ID, hung.Kind, hung.Key, "health", clk.Now())
	require.NoError(t, err)
	require.Equal(t, before+1, events(), "its end is told: its start was")
	hung.At = clk.Now().Add(time.Minute)
	opened, err := alarm.Raise(ctx, c.DB.App, hung)
	require.NoError(t, err)
	require.True(t, opened)
	require.Equal(t, before+1, events(), "raised while silenced: not notified")
	id = idOf()
	require.NotEmpty(t, row("silenced"), "the silence carried over to the re-raised alarm")
	n, _ = counted()
	require.Equal(t, 0, n)

	// The silence ends on the console's clock: counted again.
	clk.Advance(11 * time.Minute)
	require.Empty(t, row("silenced"))
	n, title = counted()
	require.Equal(t, 1, n)
	require.Equal(t, "(1) Overview · Fleetwright", title)

	// Silenced again and ended by hand; then resolved.
	base = c.Server.URL + "/t/acme/alarms/" + itoa(id)
	res, _ = paneltest.Do(t, cl, "POST", base+"/silence", url.Values{"for": {"1h0m0s"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.NotEmpty(t, row("silenced"))
	res, _ = paneltest.Do(t, cl, "POST", base+"/unsilence", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Empty(t, row("silenced"))
	require.Len(t, c.Audited(t, acme.ID, "alarm.unsilence"), 1)
	res, _ = paneltest.Do(t, cl, "POST", base+"/resolve", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Empty(t, row("open"))
	require.Contains(t, row("resolved"), "by "+email)
	require.Len(t, c.Audited(t, acme.ID, "alarm.resolve"), 1)
	n, _ = counted()
	require.Equal(t, 0, n)

}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
