package board_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/board/boardtest"
)

func patchChaos(t *testing.T, tb *bundle, body map[string]any) int {
	t.Helper()
	code, err := boardtest.Admin(context.Background(), tb.s, "PATCH", "/_sandbox/chaos", body, nil)
	require.NoError(t, err)
	return code
}

func TestChaosLatency(t *testing.T) {
	tb := setup(t, true)
	c := tb.login(t, "acme-1")
	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"latency": "fixed:10s"}))
	done := make(chan error, 1)
	go func() {
		var feed map[string]any
		done <- c.GetJSON(context.Background(), "/api/loads", &feed)
	}()
	require.True(t, tb.clk.BlockUntil(1, 5*time.Second), "the request waits on the board's clock")
	select {
	case <-done:
		t.Fatal("answered before the added latency passed")
	case <-time.After(50 * time.Millisecond):
	}
	tb.clk.Advance(10 * time.Second)
	require.NoError(t, <-done)
	require.Contains(t, tb.clk.Sleeps(), 10*time.Second)
}

func TestChaosLatencyDistributions(t *testing.T) {
	tb := setup(t, false)
	for _, bad := range []string{"zipf:3ms", "uniform:50ms-5ms", "normal:5ms", "fixed:-3ms", "banana"} {
		require.Equal(t, http.StatusBadRequest, patchChaos(t, tb, map[string]any{"latency": bad}), bad)
	}
	require.Empty(t, tb.s.Chaos().Latency, "a refused change loses nothing")
	for _, ok := range []string{"", "20ms", "uniform:1ms-2ms", "normal:5ms,1ms", "exp:1ms"} {
		require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"latency": ok}), ok)
	}
}

func TestChaosValidation(t *testing.T) {
	tb := setup(t, false)
	for _, bad := range []map[string]any{{"error_rate": 1.5}, {"captcha_rate": -0.1}, {"layout": "v9"}, {"hold": "-1s"}, {"hold": "soon"}, {"no_such_switch": 1}} {
		require.Equal(t, http.StatusBadRequest, patchChaos(t, tb, bad), "%v", bad)
	}
	require.Equal(t, board.Defaults().Chaos, tb.s.Chaos())
	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"captcha_rate": 0.25}))
	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"hold": "2s"}))
	ch := tb.s.Chaos()
	require.Equal(t, 0.25, ch.CaptchaRate, "PATCH keeps the switches it does not name")
	require.Equal(t, board.Duration(2*time.Second), ch.Hold)
}

func TestChaos5xx(t *testing.T) {
	tb := setup(t, false)
	c := tb.login(t, "acme-1")
	l := tb.publish(t, 1)[0]
	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"error_rate": 1}))
	var feed map[string]any
	require.ErrorContains(t, c.GetJSON(context.Background(), "/api/loads", &feed), "HTTP 503")
	st, body := book(t, c, l.ID, "")
	require.Equal(t, http.StatusServiceUnavailable, st)
	require.Equal(t, "unavailable", body["status"])
	s := tb.s.Stats()
	require.EqualValues(t, 1, s.BookingRequests, "the request reached the board")
	require.Zero(t, s.ConfirmedBookings, "a 5xx has no effect")

	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"error_rate": 0}))
	st, _ = book(t, c, l.ID, "")
	require.Equal(t, http.StatusCreated, st, "switched off mid-run")
}

// TestChaosBookErrorRate: the booking API fails while the feed and the
// bookings look-up still answer.
func TestChaosBookErrorRate(t *testing.T) {
	tb := setup(t, false)
	c := tb.login(t, "acme-1")
	l := tb.publish(t, 1)[0]
	require.Equal(t, http.StatusBadRequest, patchChaos(t, tb, map[string]any{"book_error_rate": 2}))
	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"book_error_rate": 1}))
	var feed map[string]any
	require.NoError(t, c.GetJSON(context.Background(), "/api/loads", &feed), "the feed still answers")
	st, body := book(t, c, l.ID, "")
	require.Equal(t, http.StatusServiceUnavailable, st)
	require.Equal(t, "unavailable", body["status"])
	require.Empty(t, bookings(t, c, "").Bookings, "the look-up answers, and a 5xx booked nothing")
	s := tb.s.Stats()
	require.EqualValues(t, 1, s.BookingRequests, "the request reached the board")
	require.Zero(t, s.ConfirmedBookings)

	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"book_error_rate": 0}))
	st, _ = book(t, c, l.ID, "")
	require.Equal(t, http.StatusCreated, st, "switched off mid-run")
}

func TestChaosLateCommit(t *testing.T) {
	tb := setup(t, true, func(c *board.Config) {
		c.Chaos.LateCommitRate = 1
		c.Chaos.LateCommitDelay = board.Duration(20 * time.Second)
	})
	c := tb.login(t, "acme-1")
	l := tb.publish(t, 1)[0]
	st, body := book(t, c, l.ID, "")
	require.Equal(t, http.StatusGatewayTimeout, st)
	require.Equal(t, "timeout", body["status"])
	require.Empty(t, bookings(t, c, "").Bookings, "not committed yet when the client gave up")

	require.True(t, tb.clk.BlockUntil(1, 5*time.Second))
	tb.clk.Advance(20 * time.Second)
	require.Eventually(t, func() bool { return len(bookings(t, c, "").Bookings) == 1 }, 5*time.Second, 10*time.Millisecond)
	bk := bookings(t, c, "").Bookings[0]
	require.Equal(t, "late_commit", bk.Source)
	require.True(t, bk.BookedAt.Equal(t0.Add(20*time.Second)))
}

func TestChaosHold(t *testing.T) {
	tb := setup(t, true, func(c *board.Config) { c.Chaos.Hold = board.Duration(30 * time.Second) })
	c := tb.login(t, "acme-1")
	l := tb.publish(t, 1)[0]
	ctx, kill := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, _, err := c.Book(ctx, l.ID, ""); errc <- err }()
	require.True(t, tb.clk.BlockUntil(1, 5*time.Second), "the request is held open")
	require.Eventually(t, func() bool { return tb.s.Stats().BookingRequests == 1 }, 5*time.Second, 5*time.Millisecond)
	kill() // the worker dies in the middle of its action
	require.Error(t, <-errc)
	require.Zero(t, tb.s.Stats().ConfirmedBookings)
	tb.clk.Advance(30 * time.Second)
	require.Eventually(t, func() bool { return tb.s.Stats().ConfirmedBookings == 1 }, 5*time.Second, 5*time.Millisecond,
		"the board finishes the held booking although its client is gone")
}

func TestChaosSessionStorm(t *testing.T) {
	tb := setup(t, true)
	a1, d1 := tb.login(t, "acme-1"), tb.login(t, "delta-1")
	var out struct{ Expired int }
	code, err := boardtest.Admin(context.Background(), tb.s, "POST", "/_sandbox/session-storm", nil, &out)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 2, out.Expired)
	var feed map[string]any
	require.ErrorContains(t, a1.GetJSON(context.Background(), "/api/loads", &feed), "HTTP 401")
	require.ErrorContains(t, d1.GetJSON(context.Background(), "/api/loads", &feed), "HTTP 401")

	// Periodic storms, on the board's clock.
	tb.clk.Advance(30 * time.Second)
	a1 = tb.login(t, "acme-1")
	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"session_storm_every": "1m"}))
	require.True(t, tb.clk.BlockUntil(1, 5*time.Second))
	require.NoError(t, a1.GetJSON(context.Background(), "/api/loads", &feed))
	tb.clk.Advance(time.Minute)
	require.Eventually(t, func() bool { return a1.GetJSON(context.Background(), "/api/loads", &feed) != nil }, 5*time.Second, 10*time.Millisecond)
}

func TestChaosCaptcha(t *testing.T) {
	tb := setup(t, false, func(c *board.Config) { c.Chaos.CaptchaRate = 1 })
	c := tb.login(t, "acme-1")
	l := tb.publish(t, 1)[0]
	st, body := book(t, c, l.ID, "")
	require.Equal(t, http.StatusForbidden, st)
	require.Equal(t, "captcha", body["status"])
	require.Equal(t, "/captcha", body["challenge_url"])
	require.Zero(t, tb.s.Stats().ConfirmedBookings, "nothing is booked behind a captcha")

	// Only a person's confirmation (the form) lets bookings through again.
	resp, err := c.HTTP.Get(tb.s.URL() + "/captcha")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(raw), "verify you are human")
	resp, err = c.HTTP.PostForm(tb.s.URL()+"/captcha", map[string][]string{"csrf_token": {c.CSRF}, "human": {"yes"}})
	require.NoError(t, err)
	resp.Body.Close()
	st, _ = book(t, c, l.ID, "")
	require.Equal(t, http.StatusCreated, st)
}

func TestChaosLayoutChange(t *testing.T) {
	tb := setup(t, false)
	c := tb.login(t, "acme-1")
	page := func() string {
		resp, err := c.HTTP.Get(tb.s.URL() + "/loads")
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return string(raw)
	}
	v1 := page()
	require.Contains(t, v1, `data-layout="v1"`)
	require.Contains(t, v1, `data-testid="load-rows"`)
	require.Contains(t, v1, `data-poll-ms="250"`)
	require.Equal(t, http.StatusOK, patchChaos(t, tb, map[string]any{"layout": "v2"}))
	v2 := page()
	require.Contains(t, v2, `data-layout="v2"`)
	require.Contains(t, v2, `data-testid="load-cards"`)
	require.NotContains(t, v2, "<table>", "the v2 page has no table of rows")
	require.True(t, strings.Contains(v2, "/api/loads"), "both layouts poll the same JSON feed")
}
