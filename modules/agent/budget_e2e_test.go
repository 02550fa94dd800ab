package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// platformCounter stands between the agent and the sandbox board (a real
// reverse proxy on loopback) and counts every request that reaches the
// platform.
type platformCounter struct {
	srv    *httptest.Server
	mu     sync.Mutex
	n      int
	by     map[string]int
	served map[string]int // answered, counted once the board's answer has passed
}

func countRequests(t *testing.T, boardURL string) *platformCounter {
	t.Helper()
	u, err := url.Parse(boardURL)
	require.NoError(t, err)
	c := &platformCounter{by: map[string]int{}, served: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.n++
		c.by[r.Method+" "+r.URL.Path]++
		c.mu.Unlock()
		proxy.ServeHTTP(w, r)
		c.mu.Lock()
		c.served[r.Method+" "+r.URL.Path]++
		c.mu.Unlock()
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// nextPoll waits until the page's feed poll has been answered once more
// after the call: loads published before it are then in the page's rows.
func (c *platformCounter) nextPoll(t *testing.T) {
	t.Helper()
	answered := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.served["GET /api/loads"]
	}
	before := answered()
	require.Eventually(t, func() bool { return answered() > before }, 20*time.Second, 10*time.Millisecond,
		"the page polled the feed again")
}

func (c *platformCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *platformCounter) path(p string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[p]
}

// The real agent's browser watcher against the sandbox board under a
// request limit of 30 per hour (the budget's clock injected): it signs in
// and polls until the budget is spent, then the platform sees no further
// request — the page's polls are failed in the browser — and the agent
// reports why (event and log line). A load published during the hold is
// not lost: when the window frees (the clock jumps an hour) the watcher
// resumes, says so, and its first poll reads the load.
func TestWatcherStopsAtRequestLimitAndResumes(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t, func(c *board.Config) { c.PollInterval = 100 * time.Millisecond })
	plat := countRequests(t, s.URL())
	p := newClaimPanel(t, plat.srv.URL, creds, wire.WorkerSpec{Name: "w1", Kind: KindWatcher})
	const budget = 30
	p.welcome.RequestLimit = &wire.RequestLimit{PerHour: budget, From: "tenant"}
	lclk := clock.NewFake(time.Now())
	_, logs := runAgentWith(t, p, "", func(c *Config) { c.LimitClock = lclk; c.StateEvery = 300 * time.Millisecond })
	p.waitConnected(t)
	p.event(t, "session_refreshed", signInWait)

	e := p.event(t, wire.EventRequestLimitReached, 30*time.Second)
	require.Equal(t, wire.LevelWarn, e.Level)
	require.Equal(t, "account_requests_hour", e.Fields["limit"])
	require.Equal(t, "30", e.Fields["value"])
	require.Equal(t, "tenant", e.Fields["from"])
	require.Contains(t, e.Message, "limit: account_requests_hour 30 (tenant limit) reached")
	require.Contains(t, e.Message, "watchers stop polling")
	require.Eventually(t, func() bool { return plat.count() == budget }, 5*time.Second, 20*time.Millisecond,
		"every counted request reached the platform")
	require.Greater(t, plat.path("GET /api/loads"), 3, "the budget went on the page's polls after the sign-in")

	// Held: nothing more reaches the platform, however long it lasts.
	loads, err := s.Publish(ctx, 1, nil)
	require.NoError(t, err)
	// Real time, not an event: the page's polls run on the browser's own
	// clock (every 100 ms here), so 1.5 s is fifteen polls that must all be
	// held in the browser.
	time.Sleep(1500 * time.Millisecond)
	require.Equal(t, budget, plat.count(), "no request over the budget left the agent")
	select {
	case sg := <-p.detected:
		t.Fatalf("a held watcher reported %s", sg.Job.Key)
	default:
	}
	require.Contains(t, logs.String(), "request limit reached")

	// The window frees: the watcher resumes and reads the held load.
	lclk.Advance(time.Hour)
	r := p.event(t, wire.EventRequestLimitResumed, 30*time.Second)
	require.Equal(t, wire.LevelInfo, r.Level)
	got := collect(t, p, map[string]*board.Load{loads[0].ID: loads[0]}, 20*time.Second)
	require.Contains(t, got, loads[0].ID)
	require.Greater(t, plat.count(), budget)
	require.True(t, strings.Contains(logs.String(), "polling and work resume"))

	// The watcher's browser has been open all along: its seconds grow in
	// the state reports (the panel's fleet_browser_seconds_total).
	seconds := func() float64 {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.state.BrowserSeconds[KindWatcher]
	}
	require.Eventually(t, func() bool { return seconds() > 2 }, 10*time.Second, 50*time.Millisecond)
	first := seconds()
	require.Eventually(t, func() bool { return seconds() > first+0.5 }, 10*time.Second, 50*time.Millisecond)
}

// A claim already ACTING finishes when the budget runs out under it: the
// browser actor's booking request leaves (counted) and is CONFIRMED. The
// next offer is new work: refused while the budget is spent, and the
// platform sees no booking request for it.
func TestActingClaimFinishesOverRequestLimit(t *testing.T) {
	ctx := context.Background()
	s, creds := boardAccount(t)
	plat := countRequests(t, s.URL())
	p := newClaimPanel(t, plat.srv.URL, creds, wire.WorkerSpec{Name: "b1", Kind: KindActor})
	runAgent(t, p, "")
	p.waitConnected(t)
	p.event(t, "session_refreshed", signInWait)

	loads, err := s.Publish(ctx, 2, nil)
	require.NoError(t, err)
	plat.nextPoll(t)
	// The limit drops to 1 while the booking request is paused in Chrome:
	// the claim is ACTING, so it goes on.
	testHookPaused = func(key string) {
		if key != loads[0].ID {
			return
		}
		require.NoError(t, p.send(wire.Configure{CommandID: uuid(), Config: p.welcome.Config,
			RequestLimit: &wire.RequestLimit{PerHour: 1, From: "global"}}))
		p.event(t, wire.EventRequestLimitReached, 10*time.Second)
	}
	t.Cleanup(func() { testHookPaused = nil })
	p.offer(t, loads[0])
	o := p.outcome(t, 30*time.Second)
	require.Equal(t, wire.ResultConfirmed, o.Result, o.Detail)
	require.Equal(t, 1, plat.path("POST /api/book"))

	before := plat.count()
	p.offer(t, loads[1])
	select {
	case o := <-p.outcomes:
		t.Fatalf("a held actor took new work: %+v", o)
	case <-time.After(2 * time.Second):
	}
	require.Equal(t, 1, plat.path("POST /api/book"), "no booking request for new work")
	require.Equal(t, before, plat.count(), "nothing at all left for the platform")
	_, err = p.claims.Get(ctx, p.tenant, loads[1].ID)
	require.Error(t, err, "no lease was even asked for the new offer")
}
