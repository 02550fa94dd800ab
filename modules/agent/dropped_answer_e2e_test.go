package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/claim"
)

// TestCommittedAnswerLostOnAReusedConnectionBooksOnce: the board commits a
// booking that arrived on a reused keep-alive connection and closes that
// connection without answering — what a proxy's idle timeout or a load
// balancer's reset does to a real board. A client stack that resends a
// request whose reused connection closed before any answer (Chromium's
// network stack does, below CDP interception) books the load a second
// time behind the actor's back. Both actors, in both idempotency modes,
// must send each booking once: the board holds one booking per load, saw
// one booking request for it, and the claim ends CONFIRMED (from the
// reconciler, since the actor never heard the answer).
func TestCommittedAnswerLostOnAReusedConnectionBooksOnce(t *testing.T) {
	for _, keys := range []bool{false, true} {
		t.Run(fmt.Sprintf("idempotency_keys=%v", keys), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			// acme-1 watches, acme-2 is the browser actor, acme-3 the HTTP actor.
			e := startFleet(t, ctx, []string{"watcher", "actor", "http_actor"}, func(c *board.Config) {
				c.IdempotencyKeys = keys
				c.Chaos.DropReusedResponseRate = 1
			})
			actors := map[string]string{"acme-2": "browser actor", "acme-3": "HTTP actor"}

			var published []string
			dropped := map[string]string{} // load → account whose answer was lost
			droppedBy := map[string]int{}
			var seq int64
			settled := func(key string) bool {
				c, err := e.eng.Store().Get(ctx, e.tenant, key)
				return err == nil && (c.State.Final() || c.State == claim.Released)
			}
			// Rounds of two loads until each actor has lost a committed
			// answer on a reused connection (each actor's first booking
			// opens a connection; a later one reuses it).
			for round := 0; round < 15 && (droppedBy["acme-2"] == 0 || droppedBy["acme-3"] == 0); round++ {
				loads, err := e.board.Publish(ctx, 2, nil)
				require.NoError(t, err)
				for _, l := range loads {
					published = append(published, l.ID)
				}
				for _, l := range loads {
					require.Eventually(t, func() bool { return settled(l.ID) }, 2*time.Minute, 50*time.Millisecond,
						"the claim of %s is settled", l.ID)
				}
				for _, ev := range e.board.Events(seq, 0) {
					seq = ev.Seq
					if ev.Type == board.EvResponseDropped {
						require.Contains(t, ev.Detail, "reused connection", "only the reused-connection switch is on")
						dropped[ev.LoadID] = ev.Account
						droppedBy[ev.Account]++
					}
				}
			}
			t.Logf("answers lost on a reused connection: %v, over %d loads", droppedBy, len(published))
			for acct, what := range actors {
				require.NotZero(t, droppedBy[acct], "the %s (%s) lost no answer: the path was not exercised", what, acct)
			}

			requests := map[string]int{}
			for _, ev := range e.board.Events(0, 0) {
				if ev.Type == board.EvBookingRequest {
					requests[ev.LoadID]++
				}
			}
			bookings := map[string]int{}
			for _, b := range e.board.Bookings("acme") {
				bookings[b.LoadID]++
			}
			for _, key := range published {
				require.LessOrEqual(t, bookings[key], 1, "load %s booked %d times", key, bookings[key])
			}
			for key, acct := range dropped {
				require.Equal(t, 1, requests[key], "the %s's booking of %s reached the board %d times", actors[acct], key, requests[key])
				require.Equal(t, 1, bookings[key], "load %s (answer lost to the %s)", key, actors[acct])
				c, err := e.eng.Store().Get(ctx, e.tenant, key)
				require.NoError(t, err)
				require.Equal(t, claim.Confirmed, c.State, "load %s (answer lost to the %s): %s %s", key, actors[acct], c.Outcome, c.Detail)
			}
			require.Zero(t, e.board.Stats().DuplicateConfirmations)
		})
	}
}
