package retention_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/clock"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/fleet"
	"github.com/fleetwright/fleetwright/modules/retention"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestSettingsResolveTenantGlobalDefault(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	var acme string
	acme = factory.Tenant(t, d, "acme", "Acme")
	by := audit.Entry{Actor: "ops@example.com"}
	require.NoError(t, retention.Set(ctx, d.App, by, retention.Global, retention.AgentEvents, 14, true))
	require.NoError(t, retention.Set(ctx, d.App, by, acme, retention.AgentEvents, 3, true))
	require.NoError(t, retention.Set(ctx, d.App, by, acme, retention.CrawlItems, 0, true))
	require.ErrorIs(t, retention.Set(ctx, d.App, by, acme, "photos", 1, true), retention.ErrUnknown)
	s, err := retention.Load(ctx, d.App, acme)
	require.NoError(t, err)
	days, from := s.Days(retention.AgentEvents)
	require.Equal(t, 3, days)
	require.Equal(t, "tenant", from)
	days, from = s.Days(retention.CrawlItems)
	require.Equal(t, 0, days, "kept forever")
	require.Equal(t, "tenant", from)
	days, from = s.Days(retention.Alarms)
	require.Equal(t, 90, days)
	require.Equal(t, "default", from)
	require.NoError(t, retention.Set(ctx, d.App, by, acme, retention.AgentEvents, 0, false))
	s, err = retention.Load(ctx, d.App, acme)
	require.NoError(t, err)
	days, from = s.Days(retention.AgentEvents)
	require.Equal(t, 14, days)
	require.Equal(t, "global", from)
	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	var n int
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'retention.set'`).Scan(&n))
	require.Equal(t, 4, n)

	for in, want := range map[string]int{"30": 30, "30d": 30, "forever": 0} {
		v, ok, err := retention.ParseDays(in)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want, v)
	}
	_, ok, err := retention.ParseDays("default")
	require.NoError(t, err)
	require.False(t, ok)
	_, _, err = retention.ParseDays("a while")
	require.ErrorContains(t, err, "not a number of days")
}

// TestPruneKeepsWhatIsStillNeeded fills each kind with old and new rows
// and rows that must survive however old they are, prunes on a fake clock,
// and checks exactly what is left; the audit log is cut behind a checkpoint
// and still verifies.
func TestPruneKeepsWhatIsStillNeeded(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	now := time.Now().UTC()
	old := now.Add(-400 * 24 * time.Hour)
	v := testenv.Vault(t)
	st := fleet.NewStore(d.App, v)
	var acme string
	acme = factory.Tenant(t, d, "acme", "Acme")
	ops := audit.Entry{Actor: "test"}
	acct := factory.Account(t, st, acme, fleet.AccountInput{Key: "acct", Workers: factory.Workers("watcher")})
	agent, _ := factory.Agent(t, st, acme, acct, "agent-1")
	// A superuser writes and reads behind row-level security.
	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := super.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, super.QueryRow(ctx, sql, args...).Scan(&n), sql)
		return n
	}
	ev := func(at time.Time, kind string, shot bool) {
		fields := `{}`
		if shot {
			fields = `{"screenshot_jpeg_base64": "AAAA"}`
		}
		exec(`INSERT INTO agent_events (tenant_id, agent_id, at, level, kind, message, fields) VALUES ($1, $2, $3, 'warn', $4, 'm', $5)`,
			acme, agent, at, kind, fields)
	}
	// Agent events: two old captchas and a new one; one old "started" (the
	// newest of its kind stays); a 10-day-old screenshot loses its image.
	ev(old, "captcha", true)
	ev(old, "captcha", true)
	ev(now.Add(-10*24*time.Hour), "captcha", true)
	ev(now.Add(-time.Hour), "captcha", true)
	ev(old, "started", false)

	// Claim archive: an old claim, an old claim of a conflicted job, a new one.
	arch := func(key string, at time.Time) {
		exec(`INSERT INTO claims_archive (tenant_id, target_job_key, state, token, holder_agent, holder_worker, operation_id, lease_expires_at, leased_at, archived_at)
			VALUES ($1, $2, 'CONFIRMED', 1, $3, 'w', gen_random_uuid(), $4, $4, $4)`, acme, key, agent, at)
	}
	arch("job-old", old)
	arch("job-conflict", old)
	arch("job-new", now)
	exec(`INSERT INTO claim_attempts (tenant_id, target_job_key, token, holder_agent, holder_worker, operation_id, leased_at, conflict)
		VALUES ($1, 'job-conflict', 1, $2, 'w', gen_random_uuid(), $3, true)`, acme, agent, old)

	// Crawl: items last seen long ago and lately; 22 old finished runs (the
	// 20 newest stay); an old trace linked from an open alarm and one not.
	var job string
	require.NoError(t, super.QueryRow(ctx, `INSERT INTO crawl_jobs (tenant_id, name) VALUES ($1, 'shop') RETURNING id::text`, acme).Scan(&job))
	for i, seen := range []time.Time{old, now} {
		exec(`INSERT INTO crawl_items (tenant_id, job_id, key, data, hash, first_seen, last_seen, changed_at, first_run, last_run)
			VALUES ($1, $2, $3, '{}', '\x00', $4, $4, $4, gen_random_uuid(), gen_random_uuid())`, acme, job, []string{"old", "new"}[i], seen)
	}
	for i := range 22 {
		at := old.Add(time.Duration(i) * time.Hour)
		exec(`INSERT INTO crawl_runs (tenant_id, job_id, version, state, queued_at, started_at, finished_at) VALUES ($1, $2, 1, 'succeeded', $3, $3, $3)`, acme, job, at)
	}
	var kept, gone int64
	require.NoError(t, super.QueryRow(ctx, `INSERT INTO crawl_traces (tenant_id, job_id, run_id, rule, detail, at) VALUES ($1, $2, gen_random_uuid(), 'r', 'd', $3) RETURNING id`, acme, job, old).Scan(&kept))
	require.NoError(t, super.QueryRow(ctx, `INSERT INTO crawl_traces (tenant_id, job_id, run_id, rule, detail, at) VALUES ($1, $2, gen_random_uuid(), 'r', 'd', $3) RETURNING id`, acme, job, old).Scan(&gone))
	// A 10-day-old browser trace loses its screenshot and stays.
	var shot int64
	require.NoError(t, super.QueryRow(ctx, `INSERT INTO crawl_traces (tenant_id, job_id, run_id, rule, detail, trace, at)
		VALUES ($1, $2, gen_random_uuid(), 'r', 'd', '{"status": 200, "screenshot_jpeg_base64": "/9j/AAAA"}', $3) RETURNING id`,
		acme, job, now.Add(-10*24*time.Hour)).Scan(&shot))
	_, err = alarm.Raise(ctx, d.App, alarm.Alarm{Kind: "crawl.zero_results", Key: job, Tenant: acme, Severity: alarm.Critical,
		Summary: "zero", Link: "/t/acme/crawl/traces/" + strconv.FormatInt(kept, 10)})
	require.NoError(t, err)

	// Alarms: an old resolved one goes, an old open one stays.
	_, err = alarm.Raise(ctx, d.App, alarm.Alarm{Kind: "cell.failing", Key: "c1", Tenant: acme, Severity: alarm.Critical, Summary: "s", At: old})
	require.NoError(t, err)
	_, err = alarm.ResolveAt(ctx, d.App, acme, "cell.failing", "c1", "test", old)
	require.NoError(t, err)

	// Audit: the tenant keeps 30 days; its entries so far are back-dated
	// by the owner (as if written long ago) and sealed.
	require.NoError(t, retention.Set(ctx, d.App, ops, acme, retention.AuditLog, 30, true))
	path := filepath.Join(t.TempDir(), "anchors.log")
	anchor := audit.NewAnchor(path, testenv.Logger(t))
	exec(`SET session_replication_role = replica`) // the append-only trigger off
	exec(`UPDATE audit_log SET at = $2 WHERE tenant_id = $1`, acme, old)
	exec(`SET session_replication_role = origin`)
	heads, err := audit.Seal(ctx, d.App)
	require.NoError(t, err)
	require.NoError(t, anchor.Write(now, heads))
	auditBefore := count(`SELECT count(*) FROM audit_log WHERE tenant_id = $1`, acme)
	require.Positive(t, auditBefore)

	p := &retention.Pruner{DB: d.App, Anchor: anchor, Clock: clock.NewFake(now), Log: testenv.Logger(t), Batch: 2}
	rep, err := p.Run(ctx)
	require.NoError(t, err)
	c := rep.Tenants[acme]
	require.EqualValues(t, 2, c[retention.AgentEvents])
	require.EqualValues(t, 2, c[retention.Screenshots], "an agent event's and a trace's")
	require.EqualValues(t, 1, c[retention.ClaimsArchive])
	require.EqualValues(t, 1, c[retention.CrawlItems])
	require.EqualValues(t, 2, c[retention.CrawlRuns])
	require.EqualValues(t, 1, c[retention.CrawlTraces])
	require.EqualValues(t, 1, c[retention.Alarms])
	require.EqualValues(t, auditBefore, c[retention.AuditLog])

	require.Equal(t, 3, count(`SELECT count(*) FROM agent_events WHERE tenant_id = $1`, acme))
	require.Equal(t, 1, count(`SELECT count(*) FROM agent_events WHERE tenant_id = $1 AND kind = 'started'`, acme), "the newest of its kind stays")
	require.Equal(t, 1, count(`SELECT count(*) FROM agent_events WHERE tenant_id = $1 AND fields ? 'screenshot_jpeg_base64'`, acme), "only the newest keeps its image")
	require.Equal(t, 2, count(`SELECT count(*) FROM claims_archive WHERE tenant_id = $1 AND target_job_key IN ('job-conflict', 'job-new')`, acme))
	require.Equal(t, 0, count(`SELECT count(*) FROM claims_archive WHERE target_job_key = 'job-old'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM crawl_items WHERE key = 'new'`))
	require.Equal(t, 0, count(`SELECT count(*) FROM crawl_items WHERE key = 'old'`))
	require.Equal(t, 20, count(`SELECT count(*) FROM crawl_runs WHERE job_id = $1`, job))
	require.Equal(t, 1, count(`SELECT count(*) FROM crawl_traces WHERE id = $1`, kept), "linked from an open alarm")
	require.Equal(t, 0, count(`SELECT count(*) FROM crawl_traces WHERE id = $1`, gone))
	require.Equal(t, 1, count(`SELECT count(*) FROM crawl_traces WHERE id = $1 AND trace->>'status' = '200' AND NOT trace ? 'screenshot_jpeg_base64'`, shot))
	require.Equal(t, 1, count(`SELECT count(*) FROM alarms WHERE tenant_id = $1`, acme), "the open alarm")

	// The prune is audited in the tenant's chain (after the checkpoint),
	// and the log still verifies across the dropped entries.
	require.Equal(t, 1, count(`SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action = 'retention.prune'`, acme))
	_, err = audit.Seal(ctx, d.App)
	require.NoError(t, err)
	vr, err := audit.Verify(ctx, d.App, path)
	require.NoError(t, err)
	require.True(t, vr.OK(), vr.Problems)
	require.Equal(t, 1, vr.Checkpoints)

	// A second run finds nothing more to do.
	rep, err = p.Run(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Total(), rep)
}
