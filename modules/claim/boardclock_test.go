package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestPublishedAtIsPutOnThePanelsClock: a sighting that carries the
// watcher's reading of the platform's clock has its published_at and
// expires_at recorded on the panel's clock (the platform's offset against
// the agent, then the agent's against the panel), and the claim keeps the
// reading's bound as the error of publish → detect; one without a reading
// keeps the platform's own times and no bound. Both dispatch modes: the
// record and the claim row are written by different statements in each.
func TestPublishedAtIsPutOnThePanelsClock(t *testing.T) {
	for _, mode := range bothModes {
		t.Run(mode, func(t *testing.T) {
			b := setup(t)
			ctx := context.Background()
			b.dispatchIn(t, b.engine, mode, b.tenant)
			m := cell.New(b.db.App, b.engine.CellConfig(cell.Config{DefaultRedisURL: testenv.RedisURL(t), Consumer: "replica-1",
				Reload: 200 * time.Millisecond, Log: testenv.Logger(t), Registerer: prometheus.NewRegistry()}))
			b.engine.SetCells(m)
			require.NoError(t, m.Start(ctx))
			t.Cleanup(m.Stop)
			if mode == claim.DispatchAssign {
				waitWarm(t, b.engine, b.tenant, 1)
			}

			now := time.Now().Truncate(time.Microsecond)
			// The platform runs 5 s ahead of the agent, the agent 2 s
			// behind the panel.
			agent := claim.Offset{Offset: -2 * time.Second, ErrorBound: 4 * time.Millisecond}
			board := &wire.BoardClock{OffsetMicros: (5 * time.Second).Microseconds(), ErrorMicros: 2500, MeasuredAt: now}
			job := func(key string) wire.Job {
				return wire.Job{Key: key, PublishedAt: now.Add(5 * time.Second), ExpiresAt: now.Add(5*time.Second + 10*time.Minute),
					Origin: "Dallas, TX", Destination: "Atlanta, GA", Miles: 780, RateCents: 200000}
			}
			seen := now.Add(40 * time.Millisecond) // agent clock: 40 ms after the publication
			require.NoError(t, b.engine.Detected(ctx, b.tenant, uuid(), wire.Detected{Worker: "watcher-1",
				Sightings: []wire.Sighting{{Job: job("LD-READ"), SeenAt: seen}}, BoardClock: board}, agent))
			require.NoError(t, b.engine.Detected(ctx, b.tenant, uuid(), wire.Detected{Worker: "watcher-1",
				Sightings: []wire.Sighting{{Job: job("LD-UNREAD"), SeenAt: seen}}}, agent))

			var read, unread claim.QueuedJob
			require.Eventually(t, func() bool {
				var err1, err2 error
				read, err1 = b.store.JobRecord(ctx, b.tenant, "LD-READ")
				unread, err2 = b.store.JobRecord(ctx, b.tenant, "LD-UNREAD")
				return err1 == nil && err2 == nil
			}, 10*time.Second, 10*time.Millisecond)
			// Platform time now+5s is agent time now, panel time now+2s.
			require.WithinDuration(t, now.Add(2*time.Second), read.Job.PublishedAt, time.Microsecond)
			require.WithinDuration(t, now.Add(2*time.Second+10*time.Minute), read.Job.ExpiresAt, time.Microsecond)
			require.NotNil(t, read.BoardClockErrorMS)
			require.EqualValues(t, 3, *read.BoardClockErrorMS, "2.5 ms rounded up")
			// publish → detect: 40 ms, whatever the agent's offset.
			require.Equal(t, 40*time.Millisecond, read.SeenAt.Sub(read.Job.PublishedAt))
			require.WithinDuration(t, now.Add(5*time.Second), unread.Job.PublishedAt, time.Microsecond)
			require.Nil(t, unread.BoardClockErrorMS)

			if mode == claim.DispatchRace {
				_, err := b.store.Lease(ctx, claim.LeaseRequest{Tenant: b.tenant, Key: "LD-READ",
					Holder: claim.Holder{Agent: uuid(), Worker: "actor-1"}, For: 10 * time.Second})
				require.NoError(t, err)
			}
			var c claim.Claim
			require.Eventually(t, func() bool {
				var err error
				c, err = b.store.Get(ctx, b.tenant, "LD-READ")
				return err == nil
			}, 10*time.Second, 10*time.Millisecond, "the claim row (granted in assign mode, leased in race mode)")
			require.NotNil(t, c.BoardClockErrorMS)
			require.EqualValues(t, 3, *c.BoardClockErrorMS)
			require.WithinDuration(t, now.Add(2*time.Second), *c.PublishedAt, time.Microsecond)
		})
	}
}
