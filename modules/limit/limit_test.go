package limit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/alarm"
	"github.com/fleetwright/fleetwright/modules/audit"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/limit"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestLowestApplies(t *testing.T) {
	l := limit.Limits{Tenant: map[limit.Name]int64{limit.Retries: 2, limit.RunTime: 600}, Global: map[limit.Name]int64{limit.Retries: 5, limit.RunTime: 60}}
	require.Equal(t, limit.Effective{Name: limit.Retries, Value: 1, From: "task", Set: true}, l.Apply(limit.Retries, 1))
	require.Equal(t, limit.Effective{Name: limit.Retries, Value: 2, From: "tenant", Set: true}, l.Apply(limit.Retries, 3))
	require.Equal(t, limit.Effective{Name: limit.RunTime, Value: 60, From: "global", Set: true}, l.Apply(limit.RunTime, 3600))
	require.False(t, l.Get(limit.CrawlPagesPerDay).Set, "no limit anywhere")
	require.Equal(t, int64(7), l.Apply(limit.CrawlPagesPerDay, 7).Value, "the task's own alone")
	require.Equal(t, "limit: run_time 1m0s (global limit)", l.Get(limit.RunTime).Reason())
}

func TestParseAndFormat(t *testing.T) {
	rt, _ := limit.DefOf(limit.RunTime)
	for in, want := range map[string]int64{"30m": 1800, "90": 90, "1h30m": 5400} {
		v, ok, err := rt.Parse(in)
		require.NoError(t, err, in)
		require.True(t, ok)
		require.Equal(t, want, v, in)
	}
	_, ok, err := rt.Parse("none")
	require.NoError(t, err)
	require.False(t, ok)
	_, _, err = rt.Parse("soon")
	require.ErrorContains(t, err, `run_time: "soon" is not a duration`)
	_, _, err = rt.Parse("10ms")
	require.ErrorContains(t, err, "under one second")
	require.Equal(t, "30m0s", rt.Format(1800))
	n, _ := limit.DefOf(limit.CrawlPagesPerDay)
	_, _, err = n.Parse("-1")
	require.ErrorContains(t, err, "not a whole number")
	_, _, err = n.Parse("ten")
	require.ErrorContains(t, err, "not a whole number")
}

// Set stores, replaces and removes a limit, audited in the right chain; a
// tenant reads its own and the global limits and never another tenant's,
// and cannot write a global one.
func TestSetLoadAuditAndIsolation(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	var acme, other string
	acme = factory.Tenant(t, d, "acme", "Acme")
	other = factory.Tenant(t, d, "other", "Other")
	by := audit.Entry{Actor: "ops@example.com"}
	require.NoError(t, limit.Set(ctx, d.App, by, acme, limit.CrawlPagesPerDay, 100, true))
	require.NoError(t, limit.Set(ctx, d.App, by, acme, limit.CrawlPagesPerDay, 50, true))
	require.NoError(t, limit.Set(ctx, d.App, by, limit.Global, limit.CrawlPagesPerDay, 80, true))
	require.NoError(t, limit.Set(ctx, d.App, by, other, limit.Retries, 1, true))
	err := limit.Set(ctx, d.App, by, acme, "coffee_per_day", 1, true)
	require.ErrorIs(t, err, limit.ErrUnknown)
	require.ErrorContains(t, err, "browser_concurrency, run_time, retries, crawl_pages_day")

	l, err := limit.Load(ctx, d.App, acme)
	require.NoError(t, err)
	require.Equal(t, map[limit.Name]int64{limit.CrawlPagesPerDay: 50}, l.Tenant, "its own, not the other tenant's")
	require.Equal(t, map[limit.Name]int64{limit.CrawlPagesPerDay: 80}, l.Global)
	require.Equal(t, "tenant", l.Get(limit.CrawlPagesPerDay).From)

	// Row-level security: a tenant's transaction cannot write a global limit.
	err = db.InTenant(ctx, d.App, acme, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO limits (tenant_id, name, value, updated_by) VALUES ($1, 'retries', 0, 'x')`, limit.Global)
		return err
	})
	require.ErrorContains(t, err, "row-level security")
	err = db.InTenant(ctx, d.App, acme, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE limits SET value = 0 WHERE tenant_id = $1`, limit.Global)
		require.Zero(t, tag.RowsAffected())
		return err
	})
	require.NoError(t, err)

	require.NoError(t, limit.Set(ctx, d.App, by, acme, limit.CrawlPagesPerDay, 0, false))
	l, err = limit.Load(ctx, d.App, acme)
	require.NoError(t, err)
	require.Empty(t, l.Tenant)
	require.Equal(t, "global", l.Get(limit.CrawlPagesPerDay).From)

	type row struct{ Chain, Target, Old, New string }
	super, err := pgx.Connect(ctx, d.SuperURL)
	require.NoError(t, err)
	defer super.Close(ctx)
	rows, err := super.Query(ctx, `SELECT tenant_id::text, target, detail->>'old', detail->>'new' FROM audit_log WHERE action = 'limit.set' ORDER BY id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Equal(t, []row{
		{acme, "tenant crawl_pages_day", "none", "100"},
		{acme, "tenant crawl_pages_day", "100", "50"},
		{audit.System, "global crawl_pages_day", "none", "80"},
		{other, "tenant retries", "none", "1"},
		{acme, "tenant crawl_pages_day", "50", "none"},
	}, got)
}

func TestReachedRaisesOneAlarmAndClearResolves(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	var acme string
	acme = factory.Tenant(t, d, "acme", "Acme")
	e := limit.Effective{Name: limit.CrawlPagesPerDay, Value: 10, From: "tenant", Set: true}
	log := testenv.Logger(t)
	limit.Reached(ctx, d.App, log, acme, e, "crawl run of shop", "/t/acme/crawl/jobs/shop")
	limit.Reached(ctx, d.App, log, acme, e, "crawl run of shop", "/t/acme/crawl/jobs/shop")
	open, err := alarm.ListTenant(ctx, d.App, acme, true, 10)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, limit.AlarmKind, open[0].Kind)
	require.Equal(t, 2, open[0].Count)
	require.Equal(t, "crawl run of shop stopped: limit: crawl_pages_day 10 (tenant limit)", open[0].Summary)
	require.Equal(t, "/t/acme/crawl/jobs/shop", open[0].Link)
	require.NoError(t, limit.Clear(ctx, d.App, acme, limit.CrawlPagesPerDay))
	open, err = alarm.ListTenant(ctx, d.App, acme, true, 10)
	require.NoError(t, err)
	require.Empty(t, open)
}

// recorder is a Notifier that notes the scope of each transaction it is
// told in (app_tenant(), read inside it) and can refuse.
type recorder struct {
	told []string
	fail bool
}

func (r *recorder) LimitChanged(ctx context.Context, tx pgx.Tx, tenant string, n limit.Name, _ audit.Entry) error {
	var scope string
	if err := tx.QueryRow(ctx, `SELECT app_tenant()::text`).Scan(&scope); err != nil {
		return err
	}
	r.told = append(r.told, string(n)+" "+tenant+" in "+scope)
	if r.fail {
		return errors.New("the news could not be queued")
	}
	return nil
}

// A changed limit is told to the notifiers: a tenant's in its own
// transaction (a refusal rolls the change back), a global one in each
// tenant's transaction after it commits (a refusal is reported; the limit
// stays). A spend of 0 is refused: it would allow nothing.
func TestSetTellsTheNotifiers(t *testing.T) {
	d := testenv.DB(t)
	ctx := context.Background()
	var acme, other string
	acme = factory.Tenant(t, d, "acme", "Acme")
	other = factory.Tenant(t, d, "other", "Other")
	by := audit.Entry{Actor: "ops@example.com"}
	r := &recorder{}
	require.NoError(t, limit.Set(ctx, d.App, by, acme, limit.ModelSpendPerDay, 2500000, true, r))
	require.Equal(t, []string{"model_spend_day " + acme + " in " + acme}, r.told)
	r.told = nil
	require.NoError(t, limit.Set(ctx, d.App, by, limit.Global, limit.ModelSpendPerDay, 5000000, true, r))
	require.ElementsMatch(t, []string{"model_spend_day " + acme + " in " + acme, "model_spend_day " + other + " in " + other}, r.told)

	r.fail = true
	err := limit.Set(ctx, d.App, by, acme, limit.ModelSpendPerDay, 1, true, r)
	require.ErrorContains(t, err, "the news could not be queued")
	err = limit.Set(ctx, d.App, by, limit.Global, limit.ModelSpendPerDay, 1, true, r)
	require.ErrorContains(t, err, "limit: model_spend_day is set, but the work of a tenant was not told: the news could not be queued")
	require.ErrorIs(t, err, limit.ErrNotTold)
	l, err := limit.Load(ctx, d.App, acme)
	require.NoError(t, err)
	require.Equal(t, int64(2500000), l.Tenant[limit.ModelSpendPerDay], "the refused news rolled the tenant's change back")
	require.Equal(t, int64(1), l.Global[limit.ModelSpendPerDay], "the global limit is the truth once set")

	require.ErrorContains(t, limit.Set(ctx, d.App, by, acme, limit.ModelSpendPerDay, 0, true), "would allow no spend at all")
	usd, _ := limit.DefOf(limit.ModelSpendPerDay)
	_, _, err = usd.Parse("0")
	require.ErrorContains(t, err, `model_spend_day: "0" would allow no spend at all: write an amount of at least 0.000001, or none to remove the limit`)
	v, ok, err := usd.Parse("$0.000001")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(1), v)
}
