package claim_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/app/vault"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/backup"
	"github.com/fleetwright/fleetwright/modules/board"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// engineOn starts a store, an engine and a River client with the engine's
// workers on d, looking bookings up through lk, configured as
// setupReconcile's.
func engineOn(t *testing.T, d *testenv.Database, lk claim.Lookuper, keys bool) (*claim.Store, *claim.Engine) {
	t.Helper()
	ctx := context.Background()
	st := claim.NewStore(d.App, nil)
	st.SetHonoursIdempotencyKeysForTest(keys)
	e, err := claim.NewEngine(st, claim.Config{Log: testenv.Logger(t), Registerer: prometheus.NewRegistry(),
		WatchFirst: 100 * time.Millisecond, HardTimeout: time.Second, BoardWorstLatency: 800 * time.Millisecond,
		ClockErrorBound: 200 * time.Millisecond, Backoff: func(int) time.Duration { return 100 * time.Millisecond },
		SweepEvery: time.Hour, DuplicateSweepEvery: time.Hour})
	require.NoError(t, err)
	e.SetLookuper(lk)
	workers := river.NewWorkers()
	e.AddWorkers(workers)
	rc, err := river.NewClient(riverpgxv5.New(d.App), &river.Config{Queues: claim.Queues(), Workers: workers,
		FetchPollInterval: 20 * time.Millisecond, FetchCooldown: 5 * time.Millisecond,
		Logger: testenv_logger(t)})
	require.NoError(t, err)
	st.SetEnqueuer(rc)
	require.NoError(t, rc.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rc.Stop(sctx)
	})
	return st, e
}

// TestRestoreNeverBooksTwice is the restore drill against the real sandbox
// board in both idempotency modes: a load booked before a backup, two
// booked and reported after it, one booked whose outcome stayed in the
// agent's outbox; the backup (fleetwright backup's pg_dump) restored into
// an empty database (fleetwright restore). On the restored database the
// later loads are sighted again and their leases are refused until the
// restore look-up has applied the board's bookings; they end CONFIRMED
// from that evidence, the outbox's outcome is applied (not refused), the
// restore alarm is raised and resolved, no load is booked twice on the
// board, and a new load is leased as usual once the tenant is cleared.
// Without the in-doubt rule every later load is leased again and booked a
// second time (keys honoured included: the restored database gives the
// re-recorded job a new booking key).
func TestRestoreNeverBooksTwice(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys bool
	}{{"keys ignored by the board", false}, {"keys honoured", true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := setupReconcile(t, func(c *board.Config) { c.IdempotencyKeys = tc.keys })
			r.store.SetHonoursIdempotencyKeysForTest(tc.keys)
			ctx := context.Background()
			book := func(e *claim.Engine, key string) (wire.LeaseResult, bool) {
				t.Helper()
				lr := e.Lease(ctx, r.tenant, r.h, wire.LeaseRequest{RequestID: "l-" + key, Worker: r.h.Worker, Key: key})
				if !lr.Granted {
					return lr, false
				}
				require.True(t, e.Act(ctx, r.tenant, r.h, wire.ActRequest{RequestID: "a-" + key, Worker: r.h.Worker, Key: key, Token: lr.Token}).OK)
				status, _, err := r.client.Book(ctx, key, lr.BookingKey)
				require.NoError(t, err)
				require.Equal(t, http.StatusCreated, status, key)
				return lr, true
			}
			confirm := func(e *claim.Engine, key string, token int64) wire.OutcomeAck {
				now := time.Now()
				return e.Outcome(ctx, r.tenant, r.h, wire.Outcome{RequestID: "o-" + key, Worker: r.h.Worker, Key: key,
					Token: token, Result: wire.ResultConfirmed, SentAt: &now, ConfirmedAt: &now}, claim.Offset{})
			}
			loads := map[string]*board.Load{}
			publish := func() string {
				ls, err := r.board.Publish(ctx, 1, nil)
				require.NoError(t, err)
				loads[ls[0].ID] = ls[0]
				r.job(t, r.tenant, ls[0].ID, func(j *wire.Job) { j.ExpiresAt = ls[0].ExpiresAt })
				return ls[0].ID
			}
			first := publish()
			lr, ok := book(r.engine, first)
			require.True(t, ok)
			require.True(t, confirm(r.engine, first, lr.Token).OK)

			dataDir := t.TempDir()
			_, err := vault.Load("", filepath.Join(dataDir, "secret.key"), true)
			require.NoError(t, err)
			dest := filepath.Join(t.TempDir(), "backup")
			_, err = backup.Backup(ctx, backup.Options{To: dest, DataDir: dataDir, DatabaseURL: r.db.SuperURL, Release: "v-test"})
			require.NoError(t, err)

			// After the backup: two loads booked and reported, one booked
			// whose outcome is still in the agent's outbox.
			later := []string{publish(), publish()}
			for _, key := range later {
				lr, ok := book(r.engine, key)
				require.True(t, ok)
				require.True(t, confirm(r.engine, key, lr.Token).OK)
			}
			unreported := publish()
			lostLease, ok := book(r.engine, unreported)
			require.True(t, ok)

			restored := testenv.EmptyDB(t)
			_, err = backup.Restore(ctx, backup.RestoreOptions{From: dest, DataDir: t.TempDir(), DatabaseURL: restored.SuperURL, Release: "v-test"})
			require.NoError(t, err)
			st, e := engineOn(t, restored, boardLookuper{c: r.client}, tc.keys)
			sc, err := pgx.Connect(ctx, restored.SuperURL)
			require.NoError(t, err)
			var n int
			require.NoError(t, sc.QueryRow(ctx, `SELECT count(*) FROM claims`).Scan(&n))
			sc.Close(ctx)
			require.Equal(t, 1, n, "the restored database knows only the load booked before the backup")

			// The fleet runs on it: the later loads are sighted again (the
			// cell's Redis forgot them) and asked for; nothing is leased.
			for _, key := range append(later, unreported) {
				now := time.Now()
				_, err := st.RecordJob(ctx, claim.QueuedJob{Tenant: r.tenant, Cell: "default", SeenAt: now, QueuedAt: now,
					Job: wire.Job{Key: key, PublishedAt: loads[key].PublishedAt, ExpiresAt: loads[key].ExpiresAt}})
				require.NoError(t, err)
				lr, booked := book(e, key)
				require.False(t, booked, "%s leased on the restored database before its bookings were looked up", key)
				require.Equal(t, wire.ReasonHeld, lr.Reason)
			}
			// The agent reconnects and sends its outbox: applied, not refused.
			ack := confirm(e, unreported, lostLease.Token)
			require.True(t, ack.OK, ack.Reason)

			// The sweep holds the tenant (alarm) and the look-up clears it.
			require.NoError(t, e.SweepAll(ctx))
			require.Eventually(t, func() bool {
				_, held, err := st.RestoreHold(ctx, r.tenant)
				require.NoError(t, err)
				return !held
			}, 20*time.Second, 50*time.Millisecond, "the restore look-up clears the tenant")
			all, err := alarm.ListTenant(ctx, restored.App, r.tenant, false, 10)
			require.NoError(t, err)
			require.Len(t, all, 1)
			require.Equal(t, claim.RestoreAlarmKind, all[0].Kind)
			require.NotNil(t, all[0].ResolvedAt, "resolved once cleared")

			for _, key := range append(append([]string{first}, later...), unreported) {
				c, err := st.Get(ctx, r.tenant, key)
				require.NoError(t, err, key)
				require.Equal(t, claim.Confirmed, c.State, key)
				lr, booked := book(e, key)
				require.False(t, booked, key)
				require.Equal(t, wire.ReasonHeld, lr.Reason, key)
			}
			for _, key := range later {
				as, err := st.Attempts(ctx, r.tenant, key)
				require.NoError(t, err)
				require.Len(t, as, 1, key)
				require.NotEmpty(t, as[0].BookingID, "%s: confirmed from the board's evidence", key)
			}
			c, err := st.Get(ctx, r.tenant, unreported)
			require.NoError(t, err)
			require.Equal(t, r.h, c.Holder, "the outbox's attempt holds the claim")

			// No load is booked twice on the board's oracle.
			per := map[string]int{}
			for _, b := range r.board.Bookings("acme") {
				per[b.LoadID]++
			}
			require.Len(t, per, 4)
			for key, n := range per {
				require.Equal(t, 1, n, "%s booked %d times", key, n)
			}
			require.Zero(t, r.board.Stats().DuplicateConfirmations)

			// Cleared: a new load is leased and booked as usual.
			fresh, err := r.board.Publish(ctx, 1, nil)
			require.NoError(t, err)
			now := time.Now()
			_, err = st.RecordJob(ctx, claim.QueuedJob{Tenant: r.tenant, Cell: "default", SeenAt: now, QueuedAt: now,
				Job: wire.Job{Key: fresh[0].ID, PublishedAt: fresh[0].PublishedAt, ExpiresAt: fresh[0].ExpiresAt}})
			require.NoError(t, err)
			lr, ok = book(e, fresh[0].ID)
			require.True(t, ok, lr.Reason)
			require.Greater(t, lr.Token, lostLease.Token, "tokens continue past the lost history's")
		})
	}
}
