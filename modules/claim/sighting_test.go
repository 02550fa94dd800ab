package claim_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// TestSightingSurvivesAPostgresOutage: a load first seen while Postgres
// refuses the panel's record of it is queued once Postgres records again —
// even after the cell's usual one-minute limit for an entry — for as long as
// the load can be booked; one that expired meanwhile is dropped and its
// seen-key with it, so the seen-key never outlives a dispatch that never
// recorded the job. Watchers see a load once (their feed has a cursor): a
// dropped first sighting would be a load lost. In both dispatch modes (in
// assign mode the record is written in the grant's transaction, refused
// the same way).
func TestSightingSurvivesAPostgresOutage(t *testing.T) {
	for _, mode := range bothModes {
		t.Run(mode, func(t *testing.T) { sightingSurvives(t, mode) })
	}
}

func sightingSurvives(t *testing.T, mode string) {
	b := setup(t)
	ctx := context.Background()
	fake := clock.NewFake(time.Now())
	got := b.dispatchIn(t, b.engine, mode, b.tenant)
	redisURL := testenv.RedisURL(t)
	reg := prometheus.NewRegistry()
	m := cell.New(b.db.App, b.engine.CellConfig(cell.Config{DefaultRedisURL: redisURL, Consumer: "replica-1",
		Reload: 200 * time.Millisecond, ReclaimIdle: 200 * time.Millisecond, Clock: fake, Log: testenv.Logger(t), Registerer: reg}))
	b.engine.SetCells(m)
	require.NoError(t, m.Start(ctx))
	t.Cleanup(m.Stop)
	if mode == claim.DispatchAssign {
		waitWarm(t, b.engine, b.tenant, 1)
	}

	// Postgres refuses to record jobs (as when it is unreachable).
	_, err := b.db.Owner.Exec(ctx, `
		CREATE FUNCTION test_refuse_record() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'test: the database is unreachable'; END $$;
		CREATE TRIGGER test_refuse_record BEFORE INSERT ON claim_jobs FOR EACH ROW EXECUTE FUNCTION test_refuse_record();`)
	require.NoError(t, err)

	sight := func(key string, expires time.Time) {
		det := wire.Detected{Worker: "watcher-1", Sightings: []wire.Sighting{{SeenAt: fake.Now(), Job: wire.Job{
			Key: key, PublishedAt: fake.Now().Add(-time.Second), ExpiresAt: expires,
			Origin: "Dallas, TX", Destination: "Atlanta, GA", Miles: 780, RateCents: 200000}}}}
		require.NoError(t, b.engine.Detected(ctx, b.tenant, uuid(), det, claim.Offset{}))
	}
	sight("LD-KEPT", time.Now().Add(10*time.Minute))
	sight("LD-GONE", time.Now().Add(90*time.Second))
	// The first dispatches of both fail: the dispatcher has left both
	// entries pending (its error count).
	require.Eventually(t, func() bool { return dispatched(t, reg, "error") >= 2 }, 10*time.Second, 10*time.Millisecond,
		"both first dispatches failed and were left pending")
	recorded := func(key string) bool {
		_, err := b.store.JobRecord(ctx, b.tenant, key)
		return err == nil
	}
	require.False(t, recorded("LD-KEPT"))

	// Three minutes pass (by the cell's clock) before Postgres is back: past
	// the one-minute limit, past LD-GONE's expiry, well within LD-KEPT's.
	fake.Advance(3 * time.Minute)
	_, err = b.db.Owner.Exec(ctx, `DROP TRIGGER test_refuse_record ON claim_jobs; DROP FUNCTION test_refuse_record();`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		fake.Advance(time.Second) // the dispatcher's reclaim runs on the cell's clock
		return got.reached(b.tenant, "LD-KEPT")
	}, 15*time.Second, 100*time.Millisecond, "the load seen during the outage is queued and offered (or granted)")
	q, err := b.store.JobRecord(ctx, b.tenant, "LD-KEPT")
	require.NoError(t, err)
	require.True(t, q.QueuedAt.After(q.SeenAt.Add(2*time.Minute)), "queued when Postgres returned (%s), seen before (%s)", q.QueuedAt, q.SeenAt)
	require.True(t, got.claimed(t, b.tenant, "LD-KEPT"))

	// The expired one is gone, and so is its seen-key.
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	require.Eventually(t, func() bool {
		fake.Advance(time.Second)
		n, err := rdb.Exists(ctx, "fw:seen:"+b.tenant+":LD-GONE").Result()
		return err == nil && n == 0
	}, 10*time.Second, 100*time.Millisecond, "the seen-key of a load never recorded does not outlive its entry")
	require.False(t, recorded("LD-GONE"))
	require.False(t, got.reached(b.tenant, "LD-GONE"))
	require.False(t, got.offered(b.tenant, "LD-GONE"))
	var n int
	require.NoError(t, db.InTenant(ctx, b.db.App, b.tenant, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM claim_jobs`).Scan(&n)
	}))
	require.Equal(t, 1, n)
}

// dispatched is the cell's count of entries its dispatcher handled with
// result (fleet_cell_dispatched_total).
func dispatched(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	n := 0.0
	for _, f := range fams {
		if f.GetName() != "fleet_cell_dispatched_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
