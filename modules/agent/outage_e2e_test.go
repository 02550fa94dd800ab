package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestBoardOutageTheFleetWaitsAndLosesNoClaim: the board answers every
// request 503 for a minute. The agents keep running (no worker fails, no
// crash loop), say what they see in their logs, and book nothing while it
// lasts; loads published before and during the outage are all claimed
// once it ends, each exactly once.
func TestBoardOutageTheFleetWaitsAndLosesNoClaim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := startFleet(t, ctx, []string{"watcher", "http_actor", "http_actor"}, nil)
	publish := func(n int) []string {
		loads, err := e.board.Publish(ctx, n, nil)
		require.NoError(t, err)
		var keys []string
		for _, l := range loads {
			keys = append(keys, l.ID)
		}
		return keys
	}
	confirmed := func(keys []string) int {
		n := 0
		for _, k := range keys {
			if c, err := e.eng.Store().Get(ctx, e.tenant, k); err == nil && c.State == claim.Confirmed {
				n++
			}
		}
		return n
	}
	before := publish(3)
	require.Eventually(t, func() bool { return confirmed(before) == 3 }, time.Minute, 200*time.Millisecond, "claims before the outage")

	ch := e.board.Chaos()
	ch.ErrorRate = 1
	require.NoError(t, e.board.SetChaos(ch))
	during := publish(3)
	booked := len(e.board.Bookings("acme"))
	// Real time, not an event: what is shown is that nothing happens. The
	// agents' sessions, polls and retries run on their own real clocks, so
	// a minute of a failing board covers several rounds of each.
	time.Sleep(time.Minute)
	require.Equal(t, booked, len(e.board.Bookings("acme")), "nothing is booked while the board fails")
	require.Zero(t, confirmed(during))
	for id, p := range e.agents {
		select {
		case <-p.Exited():
			t.Fatalf("agent %s exited during the outage:\n%s", id, p.Output())
		default:
		}
	}
	ch.ErrorRate = 0
	require.NoError(t, e.board.SetChaos(ch))

	require.Eventually(t, func() bool { return confirmed(during) == 3 }, 2*time.Minute, 250*time.Millisecond,
		"the loads published during the outage are claimed once it ends")
	after := publish(2)
	require.Eventually(t, func() bool { return confirmed(after) == 2 }, time.Minute, 200*time.Millisecond, "and new ones too")
	require.Zero(t, e.board.Stats().DuplicateConfirmations)
	require.Len(t, e.board.Bookings("acme"), 8, "eight loads, eight bookings")

	// Every worker still runs, none failed or spent its budget; no crash loop.
	fl, err := e.store.List(ctx, e.tenant)
	require.NoError(t, err)
	for _, a := range fl.Agents {
		for _, w := range a.State.Workers {
			require.Equal(t, wire.WorkerRunning, w.State, "%s on %s", w.Name, a.Name)
		}
	}
	open, err := alarm.ListTenant(ctx, e.d.App, e.tenant, true, 20)
	require.NoError(t, err)
	for _, a := range open {
		require.NotContains(t, []string{"worker.crash_loop", "agent.crash_loop"}, a.Kind, a.Summary)
	}
	// The agents said what they saw.
	var logs strings.Builder
	for _, p := range e.agents {
		logs.WriteString(p.Output())
	}
	require.Regexp(t, `503|unavailable|error page`, logs.String())
}
