package panel_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/cell"
	"github.com/fleetwright/fleetwright/modules/claim"
	"github.com/fleetwright/fleetwright/modules/durability"
	"github.com/fleetwright/fleetwright/modules/panel"
	"github.com/fleetwright/fleetwright/modules/wire"
)

// haPanel starts a panel on the Patroni cluster (its multi-host URLs) and
// the Sentinel set (addresses and master name), as an operator's flags
// would name them.
func haPanel(t *testing.T, c *testenv.PGCluster, rs *testenv.HARedisSet, mod ...func(*panel.Config)) (*panel.Panel, error) {
	t.Helper()
	dir, err := os.MkdirTemp(testenv.Dir(t), "hapanel-")
	require.NoError(t, err)
	var sentinels []string
	for _, s := range rs.Sentinels {
		sentinels = append(sentinels, s.Addr())
	}
	cfg := panel.Config{Listen: "127.0.0.1:0", DataDir: dir, DatabaseURL: c.OwnerURL, DatabaseAppURL: c.AppURL,
		RedisSentinels: sentinels, RedisMaster: testenv.HAMaster, DBMaxConns: 16, PGMaxConnections: 300,
		ShutdownTimeout: 5 * time.Second, SessionIdle: 30 * time.Minute, SessionMax: time.Hour, AuditSealInterval: time.Minute,
		HealthInterval: time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	p, err := panel.Start(context.Background(), cfg, testenv.Logger(t))
	if err == nil {
		go func() { _ = p.Serve() }()
		t.Cleanup(p.Stop)
	}
	return p, err
}

// haTenant makes a tenant that wants every job, on the panel's cluster.
func haTenant(t *testing.T, c *testenv.PGCluster, p *panel.Panel, slug string) string {
	t.Helper()
	ctx := context.Background()
	owner, err := db.Open(ctx, c.OwnerURL, 2)
	require.NoError(t, err)
	defer owner.Close()
	var id string
	require.NoError(t, owner.QueryRow(ctx, `INSERT INTO tenants (slug, name) VALUES ($1, $1) RETURNING id::text`, slug).Scan(&id))
	_, err = p.Claims.PutFilter(ctx, haBy, id, claim.Filter{Name: "everything", Enabled: true})
	require.NoError(t, err)
	return id
}

// haLease records a job and leases it for worker; it reports the answer.
func haLease(t *testing.T, p *panel.Panel, tenant, key, worker string) wire.LeaseResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	now := time.Now()
	_, err := p.Claims.Store().RecordJob(ctx, claim.QueuedJob{Tenant: tenant, Cell: cell.DefaultCell,
		Job: wire.Job{Key: key, PublishedAt: now, ExpiresAt: now.Add(time.Hour), Origin: "Dallas, TX", Destination: "Atlanta, GA",
			Equipment: "Dry Van", RateCents: 100000}, SeenAt: now, QueuedAt: now})
	if err != nil {
		return wire.LeaseResult{Key: key, Reason: "record: " + err.Error()}
	}
	h := claim.Holder{Agent: "00000000-0000-4000-8000-0000000000b1", Worker: worker}
	return p.Claims.Lease(ctx, tenant, h, wire.LeaseRequest{RequestID: "l-" + key, Worker: worker, Key: key})
}

var haBy = audit.Entry{Actor: "test"}

// TestPanelHA runs the panel on a Patroni cluster (synchronous_mode_strict)
// and a Sentinel-watched Redis, and breaks them in turn:
//   - bad input: a URL naming only standbys, a master name no Sentinel knows;
//   - the Redis master killed: Sentinel promotes the replica, the cell
//     claims again, and the database still decides every lease;
//   - both standbys stopped: the durability check holds new leases at once
//     (refused, not left waiting), raises the alarm and shows the hold;
//     they resume by themselves when a synchronous standby is back;
//   - the leader's every process SIGKILLed while leases stream: the panel
//     reconnects to the new primary and claiming resumes, and no lease
//     acknowledged before, during or after is missing.
func TestPanelHA(t *testing.T) {
	ctx := context.Background()
	c := testenv.HAPostgres(t)
	rs := testenv.HARedis(t)
	leader, err := c.WaitLeader(time.Minute)
	require.NoError(t, err)
	var standbys []*testenv.PGMember
	for _, m := range c.Members {
		if m != leader {
			standbys = append(standbys, m)
		}
	}

	// Bad input.
	_, err = haPanel(t, c, rs, func(cfg *panel.Config) {
		cfg.DatabaseURL, cfg.DatabaseAppURL = c.URLOf(c.OwnerURL, standbys...), c.URLOf(c.AppURL, standbys...)
	})
	require.Error(t, err)
	require.Contains(t, err.Error(), "none of "+standbys[0].Addr()+", "+standbys[1].Addr()+" accepted a session")
	require.Contains(t, err.Error(), "target_session_attrs=read-write")
	require.Contains(t, err.Error(), "patronictl list")
	_, err = haPanel(t, c, rs, func(cfg *panel.Config) { cfg.RedisMaster = "no-such-master" })
	require.ErrorIs(t, err, cell.ErrUnknownMaster)
	require.Contains(t, err.Error(), `"no-such-master"`)
	require.Contains(t, err.Error(), "--redis-master")

	p, err := haPanel(t, c, rs, func(cfg *panel.Config) { cfg.DatabaseReplication = "sync" })
	require.NoError(t, err)
	require.True(t, cell.IsSentinel(p.Cells.Status()[0].RedisURL), "the default cell follows the Sentinels")
	require.False(t, p.Durability.Held())
	require.Eventually(t, func() bool { return gathered(t, p, "fleet_cell_sentinel_quorum") == 1 }, 30*time.Second, 100*time.Millisecond,
		"the Sentinels' quorum is reported")
	tenant := haTenant(t, c, p, "acme")

	// Every lease the panel acknowledged, by key: each must be in the
	// database at the end, with the token it was acknowledged with.
	acked := map[string]int64{}
	lease := func(key, worker string) wire.LeaseResult {
		lr := haLease(t, p, tenant, key, worker)
		if lr.Granted {
			acked[key] = lr.Token
		}
		return lr
	}
	lr := lease("J-1", "actor-1")
	require.True(t, lr.Granted, lr.Reason)

	// Redis: the master dies, Sentinel promotes the replica.
	detect := func(key string) (bool, error) {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		now := time.Now()
		q, _, err := p.Cells.Detect(dctx, cell.Entry{Tenant: tenant, Job: wire.Job{Key: key, ExpiresAt: now.Add(time.Hour)}, SeenAt: now})
		return q, err
	}
	queued, err := detect("R-1")
	require.NoError(t, err)
	require.True(t, queued)
	require.True(t, lease("R-1", "actor-1").Granted)
	oldMaster, err := rs.Master()
	require.NoError(t, err)
	oldMaster.Kill()
	killedAt := time.Now()
	_, err = rs.WaitMaster(oldMaster, 30*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { q, err := detect("R-2"); return err == nil && q }, 30*time.Second, 100*time.Millisecond,
		"the cell queues sightings again once the promoted master answers")
	t.Logf("redis failover: the cell queued again %s after the master was killed", time.Since(killedAt).Round(time.Millisecond))
	// Whatever Redis remembers of R-1 after the failover, the database
	// decides its lease: held by actor-1, refused to anyone else.
	_, _ = detect("R-1")
	lr = lease("R-1", "actor-2")
	require.False(t, lr.Granted)
	require.Equal(t, wire.ReasonHeld, lr.Reason)
	require.True(t, lease("R-2", "actor-1").Granted)

	// Standby loss: both standbys stop, the primary is alone.
	for _, m := range standbys {
		c.Stop(m)
	}
	lostAt := time.Now()
	require.Eventually(t, p.Durability.Held, 30*time.Second, 50*time.Millisecond, "the durability check holds claims")
	t.Logf("standby loss: claims held %s after the standbys stopped", time.Since(lostAt).Round(time.Millisecond))
	// The hold is in memory first; the database's hold and the alarm land
	// right after.
	require.Eventually(t, func() bool {
		open, err := alarm.IsOpen(ctx, p.DB, alarm.System, durability.AlarmKind, "cluster")
		return err == nil && open
	}, 20*time.Second, 50*time.Millisecond, "a critical alarm is open")
	reason, _, err := durability.Hold(ctx, p.DB)
	require.NoError(t, err)
	require.Contains(t, reason, "no synchronous standby is streaming", "the overview's hold says why")
	require.NoError(t, haRecord(ctx, p, tenant, "H-1"), "the panel's other writes go on, committed locally")
	t0 := time.Now()
	lr = p.Claims.Lease(ctx, tenant, claim.Holder{Agent: "00000000-0000-4000-8000-0000000000b1", Worker: "actor-1"},
		wire.LeaseRequest{RequestID: "l-H-1", Worker: "actor-1", Key: "H-1"})
	require.False(t, lr.Granted)
	require.Equal(t, wire.ReasonPaused, lr.Reason, "held leases are refused as a pause is")
	require.Less(t, time.Since(t0), 2*time.Second, "refused at once, not left waiting for a standby")
	resp, err := http.Get("http://" + p.Addr() + "/signin")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the console keeps serving")

	for _, m := range standbys {
		require.NoError(t, c.StartMember(m))
	}
	backAt := time.Now()
	require.Eventually(t, func() bool { return !p.Durability.Held() }, 90*time.Second, 100*time.Millisecond,
		"claims resume by themselves when a synchronous standby is back")
	t.Logf("standby loss: claims resumed %s after the standbys started again", time.Since(backAt).Round(time.Millisecond))
	open, err := alarm.IsOpen(ctx, p.DB, alarm.System, durability.AlarmKind, "cluster")
	require.NoError(t, err)
	require.False(t, open, "the alarm is resolved")
	lr = lease("H-1", "actor-1")
	require.True(t, lr.Granted, lr.Reason)

	// Failover: every process of the leader SIGKILLed while leases stream.
	_, err = c.WaitSyncStandby(60 * time.Second)
	require.NoError(t, err)
	type grant struct{ start, end time.Time }
	var mu sync.Mutex
	var grants []grant
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("F-%04d", i)
			start := time.Now()
			lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			lr := wire.LeaseResult{}
			if haRecord(lctx, p, tenant, key) == nil {
				lr = p.Claims.Lease(lctx, tenant, claim.Holder{Agent: "00000000-0000-4000-8000-0000000000b1", Worker: "actor-1"},
					wire.LeaseRequest{RequestID: "l-" + key, Worker: "actor-1", Key: key})
			}
			cancel()
			if lr.Granted {
				mu.Lock()
				acked[key] = lr.Token
				grants = append(grants, grant{start, time.Now()})
				mu.Unlock()
			} else {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(grants) > 10 }, 30*time.Second, 50*time.Millisecond)
	leader, err = c.WaitLeader(10 * time.Second)
	require.NoError(t, err)
	killAt := time.Now()
	c.Kill(leader)
	deadAt := time.Now()
	_, err = c.WaitNewLeader(leader, 90*time.Second)
	require.NoError(t, err)
	// The gap runs from the last lease granted before the kill to the first
	// one asked for after every process of the old leader was dead.
	var lastBefore, firstAfter time.Time
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		lastBefore, firstAfter = time.Time{}, time.Time{}
		for _, g := range grants {
			if g.end.Before(killAt) && g.end.After(lastBefore) {
				lastBefore = g.end
			}
			if g.start.After(deadAt) && (firstAfter.IsZero() || g.end.Before(firstAfter)) {
				firstAfter = g.end
			}
		}
		return !firstAfter.IsZero()
	}, 90*time.Second, 100*time.Millisecond, "claiming resumes on the new primary")
	close(stop)
	wg.Wait()
	t.Logf("failover: claiming stopped %s (last lease before the kill to the first after)", firstAfter.Sub(lastBefore).Round(time.Millisecond))
	require.Eventually(t, func() bool { return gathered(t, p, "fleet_db_primary_changes_total") >= 1 }, 30*time.Second, 100*time.Millisecond,
		"the failover is counted for the alert")

	// No acknowledged lease is missing on the new primary.
	have := map[string]int64{}
	require.NoError(t, haInTenant(ctx, p, tenant, have))
	for key, token := range acked {
		require.Equalf(t, token, have[key], "acknowledged lease %s is in the database with its token", key)
	}
	t.Logf("%d acknowledged leases, none missing", len(acked))
}

// gathered is the value of a counter or gauge without labels in p's registry.
func gathered(t *testing.T, p *panel.Panel, name string) float64 {
	t.Helper()
	mfs, err := p.Reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return -1
}

// haRecord records a queued job (the dispatcher's write).
func haRecord(ctx context.Context, p *panel.Panel, tenant, key string) error {
	now := time.Now()
	_, err := p.Claims.Store().RecordJob(ctx, claim.QueuedJob{Tenant: tenant, Cell: cell.DefaultCell,
		Job: wire.Job{Key: key, PublishedAt: now, ExpiresAt: now.Add(time.Hour), Origin: "Dallas, TX", Destination: "Atlanta, GA",
			Equipment: "Dry Van", RateCents: 100000}, SeenAt: now, QueuedAt: now})
	return err
}

// haInTenant reads every claim's token of tenant into out.
func haInTenant(ctx context.Context, p *panel.Panel, tenant string, out map[string]int64) error {
	return db.InTenant(ctx, p.DB, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT target_job_key, token FROM claims WHERE tenant_id = $1`, tenant)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var tok int64
			if err := rows.Scan(&k, &tok); err != nil {
				return err
			}
			out[k] = tok
		}
		return rows.Err()
	})
}

// TestLonePrimaryAcknowledgesNothing: on a Patroni cluster whose leader has
// lost every standby, a lease whose synchronous wait is cut short — by a
// cancel request (Postgres then answers with success and a WARNING) or by a
// terminate — is never acknowledged.
func TestLonePrimaryAcknowledgesNothing(t *testing.T) {
	settle := claim.SettleFor
	claim.SettleFor = 5 * time.Second
	t.Cleanup(func() { claim.SettleFor = settle })
	c := testenv.HAPostgres(t)
	rs := testenv.HARedis(t)
	p, err := haPanel(t, c, rs)
	require.NoError(t, err)
	tenant := haTenant(t, c, p, "acme")
	aloneNeverAcknowledges(t, c, p, tenant)
}

// aloneNeverAcknowledges stops every standby of c's leader, so a commit
// waits for a synchronous standby that is not there, and cuts a lease's
// wait short twice: with a cancel request (Postgres then answers the
// client with success and a WARNING: the commit is on the primary alone)
// and with a terminate (the connection ends; the row is there when read
// back). Neither lease may be acknowledged: the first is reported as a
// commit of unknown result, and both are read back under a synchronous
// commit of the reader's own, which waits for the standby too.
func aloneNeverAcknowledges(t *testing.T, c *testenv.PGCluster, p *panel.Panel, tenant string) {
	ctx := context.Background()
	leader, err := c.WaitLeader(time.Minute)
	require.NoError(t, err)
	_, err = c.WaitSyncStandby(time.Minute)
	require.NoError(t, err)
	for _, k := range []string{"C-1", "T-1"} {
		require.NoError(t, haRecord(ctx, p, tenant, k))
	}
	// The panel's durability check would hold every lease once the
	// standbys are gone (inside the statements too): it goes first.
	p.Stop()
	// A claim engine of its own, with no durability check (which would
	// refuse the leases before they are sent), on a pool that names itself
	// so its backend can be found.
	pool, err := db.Open(ctx, c.URLOf(c.AppURL, leader)+"&application_name=alone", 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	eng, err := claim.NewEngine(claim.NewStore(pool, nil), claim.Config{Log: testenv.Logger(t).With("component", "alone")})
	require.NoError(t, err)
	for _, m := range c.Members {
		if m != leader {
			c.Stop(m)
		}
	}
	super, err := pgx.Connect(ctx, c.URLOf(c.SuperURL, leader))
	require.NoError(t, err)
	defer super.Close(ctx)
	for _, cut := range []struct{ key, fn string }{{"C-1", "pg_cancel_backend"}, {"T-1", "pg_terminate_backend"}} {
		done := make(chan wire.LeaseResult, 1)
		go func() {
			lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			done <- eng.Lease(lctx, tenant, claim.Holder{Agent: "00000000-0000-4000-8000-0000000000b3", Worker: "actor-3"},
				wire.LeaseRequest{RequestID: "l-" + cut.key, Worker: "actor-3", Key: cut.key})
		}()
		var pid int
		require.Eventually(t, func() bool {
			return super.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = 'alone' AND wait_event = 'SyncRep'
				AND query NOT LIKE '%pg_logical_emit_message%' LIMIT 1`).Scan(&pid) == nil
		}, 30*time.Second, 50*time.Millisecond, "the lease of %s waits for a synchronous standby", cut.key)
		var ok bool
		require.NoError(t, super.QueryRow(ctx, `SELECT `+cut.fn+`($1)`, pid).Scan(&ok))
		require.True(t, ok)
		select {
		case lr := <-done:
			require.Falsef(t, lr.Granted, "%s: a lease committed on the primary alone was acknowledged (token %d)", cut.fn, lr.Token)
			t.Logf("%s of %s's wait: not granted (%s)", cut.fn, cut.key, lr.Reason)
		case <-time.After(90 * time.Second):
			t.Fatalf("the lease of %s never ended", cut.key)
		}
	}
}
