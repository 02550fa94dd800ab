package agent

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/modules/wire"
)

type eventLog struct {
	mu sync.Mutex
	ev []wire.Event
}

func (l *eventLog) add(e wire.Event) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *eventLog) kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.ev {
		out = append(out, e.Kind)
	}
	return out
}

// The budget counts per second over a rolling hour: at the limit it
// refuses new requests (a request finishing work in progress is counted,
// never refused), reports the hold once with its reason, and frees as the
// oldest seconds leave the window, reporting the resumption once.
func TestRequestBudgetRollingHour(t *testing.T) {
	start := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	var ev eventLog
	b := newRequestBudget(clk, slog.New(slog.DiscardHandler), ev.add)

	for range 100 {
		require.NoError(t, b.take(false), "no limit: nothing refused")
	}
	b.set(&wire.RequestLimit{PerHour: 3, From: "tenant"})
	require.True(t, b.holding(), "100 counted in the window already: a lowered limit holds at once")
	require.Equal(t, []string{wire.EventRequestLimitReached}, ev.kinds(), "and says so")
	err := b.take(false)
	require.ErrorContains(t, err, "limit: account_requests_hour 3 (tenant limit) spent: no request to the platform until 2026-12-01T07:00:00Z")
	b.set(nil)
	require.False(t, b.holding())
	require.Equal(t, []string{wire.EventRequestLimitReached, wire.EventRequestLimitResumed}, ev.kinds())

	clk.Advance(time.Hour) // the 100 leave the window
	b.set(&wire.RequestLimit{PerHour: 3, From: "global"})
	require.NoError(t, b.take(false))
	clk.Advance(10 * time.Minute)
	require.NoError(t, b.take(false))
	require.False(t, b.holding())
	require.NoError(t, b.take(false), "the third fills the budget")
	require.True(t, b.holding())
	ev.mu.Lock()
	reached := ev.ev[len(ev.ev)-1]
	ev.mu.Unlock()
	require.Equal(t, wire.EventRequestLimitReached, reached.Kind)
	require.Equal(t, "3", reached.Fields["value"])
	require.Equal(t, "global", reached.Fields["from"])
	require.Equal(t, "3", reached.Fields["counted"])
	require.Equal(t, "2026-12-01T08:00:00Z", reached.Fields["frees_at"], "the oldest request leaves the window an hour after it")
	require.Contains(t, reached.Message, "limit: account_requests_hour 3 (global limit) reached")

	var be *errBudget
	require.ErrorAs(t, b.take(false), &be, "new work is refused")
	require.NoError(t, b.take(true), "an ACTING claim's booking still leaves")
	require.NoError(t, b.admit(mustRequest(t)), "so does a look-up")
	require.Len(t, ev.kinds(), 3, "one reached event for the whole hold")
	require.NotEmpty(t, b.reason())

	// The window frees as the first request's second leaves it; the
	// second request (10 minutes later) and the must ones still count.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- b.wait(ctx) }()
	require.True(t, clk.BlockUntil(1, 5*time.Second), "wait sleeps until the window frees")
	clk.Advance(49*time.Minute + 59*time.Second)
	select {
	case err := <-waited:
		t.Fatalf("wait returned early: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.True(t, b.holding())
	clk.Advance(time.Second)
	require.True(t, b.holding(), "4 of 3 still counted (the must ones too): still held")
	require.True(t, clk.BlockUntil(1, 5*time.Second), "wait sleeps until the next second leaves")
	clk.Advance(10 * time.Minute)
	require.NoError(t, <-waited)
	require.False(t, b.holding())
	require.Equal(t, []string{wire.EventRequestLimitReached, wire.EventRequestLimitResumed, wire.EventRequestLimitReached, wire.EventRequestLimitResumed}, ev.kinds())
	require.NoError(t, b.take(false))
}

func mustRequest(t *testing.T) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(mustSend(context.Background()), http.MethodGet, "http://127.0.0.1/api/bookings", nil)
	require.NoError(t, err)
	return req
}
