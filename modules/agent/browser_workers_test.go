package agent

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// collect reads sightings until every key in want was seen.
func collect(t *testing.T, p *claimPanel, want map[string]*board.Load, wait time.Duration) map[string]wire.Sighting {
	t.Helper()
	got := map[string]wire.Sighting{}
	deadline := time.After(wait)
	for len(got) < len(want) {
		select {
		case s := <-p.detected:
			if _, ok := want[s.Job.Key]; ok {
				got[s.Job.Key] = s
			}
		case <-deadline:
			t.Fatalf("the watcher reported %d of %d loads", len(got), len(want))
		}
	}
	return got
}

// The browser watcher reads the loads page's own JSON responses through
// CDP and reports DETECTED with the board's published_at and its seen_at;
// with the board's layout switched to v2 (cards, "Reserve") it keeps
// detecting, because it never reads the DOM.
func TestWatcherDetectsFromJSON(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t)
	p := newClaimPanel(t, s.URL(), creds, wire.WorkerSpec{Name: "w1", Kind: KindWatcher})
	stop, logs := runAgent(t, p, "")
	p.waitConnected(t)
	p.event(t, "session_refreshed", signInWait)

	check := func(loads []*board.Load) {
		want := map[string]*board.Load{}
		for _, l := range loads {
			want[l.ID] = l
		}
		got := collect(t, p, want, 20*time.Second)
		for id, sg := range got {
			require.True(t, sg.Job.PublishedAt.Equal(want[id].PublishedAt), "published_at is the board's")
			require.False(t, sg.SeenAt.Before(want[id].PublishedAt), "seen after published")
			require.Equal(t, want[id].Equipment, sg.Job.Equipment)
			require.EqualValues(t, want[id].RateUSD*100, sg.Job.RateCents)
		}
	}
	loads, err := s.Publish(ctx, 3, nil)
	require.NoError(t, err)
	check(loads)

	ch := s.Chaos()
	ch.Layout = "v2"
	require.NoError(t, s.SetChaos(ch))
	// The new markup only shows after a reload: sign the page out so the
	// watcher reloads it (and signs in again) under the v2 layout.
	require.Equal(t, 1, s.SessionStorm(1))
	p.event(t, "session_refreshed", 60*time.Second)
	loads, err = s.Publish(ctx, 3, nil)
	require.NoError(t, err)
	check(loads)
	stop()
	noSecrets(t, logs, creds, "")
}

// A browser actor books by clicking on its warm page. When its local
// deadline passes while the booking request is paused in Chrome, the
// request is failed in the browser: the board never sees it, and the claim
// is reported NOT_SENT (released at once).
func TestBrowserActorDeadlineWhilePaused(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t, func(c *board.Config) { c.IdempotencyKeys = true })
	plat := countRequests(t, s.URL())
	p := newClaimPanel(t, plat.srv.URL, creds, wire.WorkerSpec{Name: "b1", Kind: KindActor,
		Settings: map[string]string{SettingMarginMS: "500"}})
	p.leaseFor = 3 * time.Second
	// The board honours keys, and the tenant's setting says so.
	require.NoError(t, p.claims.SetHonoursIdempotency(ctx, audit.Entry{Actor: "admin"}, p.tenant, "sandbox", true))
	runAgent(t, p, "")
	p.waitConnected(t)
	p.event(t, "session_refreshed", signInWait)

	loads, err := s.Publish(ctx, 2, nil)
	require.NoError(t, err)
	plat.nextPoll(t)
	p.offer(t, loads[0])
	o := p.outcome(t, 20*time.Second)
	require.Equal(t, wire.ResultConfirmed, o.Result, o.Detail)
	bk := s.Bookings("acme")
	require.Len(t, bk, 1)
	var bookingKey string
	require.NoError(t, db.TenantRow(ctx, p.db.App, p.tenant, `SELECT booking_key::text FROM claim_jobs WHERE job_key = $1`, loads[0].ID).Scan(&bookingKey))
	require.Equal(t, bookingKey, bk[0].IdempotencyKey, "the browser's request carried the job's booking key")

	testHookPaused = func(key string) {
		if key == loads[1].ID {
			// Real time: the deadline is the agent's monotonic clock, so the
			// request is held past the 3 s lease minus the margin.
			time.Sleep(3 * time.Second)
		}
	}
	t.Cleanup(func() { testHookPaused = nil })
	before := s.Stats().BookingRequests
	p.offer(t, loads[1])
	o = p.outcome(t, 20*time.Second)
	require.Equal(t, wire.ResultNotSent, o.Result, o.Detail)
	require.Nil(t, o.SentAt)
	require.Equal(t, before, s.Stats().BookingRequests, "the board never saw the request")
	require.Len(t, s.Bookings("acme"), 1)
	// The claim went through the fenced ACTING statement, and NOT_SENT
	// released it at once.
	require.Eventually(t, func() bool {
		c, err := p.claims.Get(ctx, p.tenant, loads[1].ID)
		return err == nil && c.State == claim.Released && c.Outcome == string(claim.NotSent)
	}, 10*time.Second, 50*time.Millisecond)
}

// A captcha stops the worker: the booking is reported UNKNOWN (the
// reconciler settles it), the panel gets a "needs a person" event with a
// small screenshot, and the worker takes no further offer.
func TestCaptchaStopsWorker(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t)
	plat := countRequests(t, s.URL())
	p := newClaimPanel(t, plat.srv.URL, creds, wire.WorkerSpec{Name: "b1", Kind: KindActor})
	runAgent(t, p, "")
	p.waitConnected(t)
	p.event(t, "session_refreshed", signInWait)
	ch := s.Chaos()
	ch.CaptchaRate = 1
	require.NoError(t, s.SetChaos(ch))

	loads, err := s.Publish(ctx, 2, nil)
	require.NoError(t, err)
	plat.nextPoll(t)
	p.offer(t, loads[0])
	o := p.outcome(t, 20*time.Second)
	require.Equal(t, wire.ResultUnknown, o.Result)
	require.Contains(t, o.Detail, "captcha")
	e := p.event(t, "needs_person", 20*time.Second)
	require.Equal(t, "b1", e.Worker)
	require.Equal(t, "captcha", e.Fields["reason"])
	shot, err := base64.StdEncoding.DecodeString(e.Fields["screenshot_jpeg_base64"])
	require.NoError(t, err)
	require.Greater(t, len(shot), 1000)
	require.Equal(t, []byte{0xff, 0xd8}, shot[:2], "a JPEG")
	require.Less(t, len(e.Fields["screenshot_jpeg_base64"]), wire.MaxMessageBytes)

	requests := s.Stats().BookingRequests
	p.offer(t, loads[1])
	select {
	case o := <-p.outcomes:
		t.Fatalf("a stopped worker acted: %+v", o)
	case <-time.After(2 * time.Second):
	}
	require.Equal(t, requests, s.Stats().BookingRequests)
}
