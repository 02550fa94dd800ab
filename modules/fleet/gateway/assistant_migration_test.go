package gateway_test

import (
	"context"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/embedded"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/migrations"
	"github.com/fleetwright/fleetwright/modules/factory"
	"github.com/fleetwright/fleetwright/modules/limit"
)

// Migration 0130 moves the assistant limits' spend per day into the
// model_spend_day limit: a tenant's value becomes its row, the
// installation's the global row, the lower one is kept where both were set,
// a stored 0 becomes one micro-dollar, and the JSON loses the key while
// keeping the other limits.
func TestMigrationMovesTheAssistantSpendPerDayToModelSpendDay(t *testing.T) {
	d := testenv.EmptyDB(t)
	ctx := context.Background()
	log := testenv.Logger(t)
	before := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, n := range names {
		if n < "0130" {
			b, err := fs.ReadFile(migrations.FS, n)
			require.NoError(t, err)
			before[n] = &fstest.MapFile{Data: b}
		}
	}
	require.NoError(t, db.Migrate(ctx, d.Owner, before, embedded.AppRole, "test", log))

	tenant := func(slug, limits string) string {
		id := factory.Tenant(t, d, slug, slug)
		_, err := d.Owner.Exec(ctx, `UPDATE tenants SET assistant_limits = $2 WHERE id = $1`, id, limits)
		require.NoError(t, err)
		return id
	}
	only := tenant("only-json", `{"task_steps": 5, "day_cost_usd": 2.5}`)
	lower := tenant("json-lower", `{"day_cost_usd": 1}`)
	higher := tenant("json-higher", `{"day_cost_usd": 9, "day_tokens": 1000}`)
	zero := tenant("zero-row", `{}`)
	none := tenant("none", `{"task_tabs": 3}`)
	row := func(tenant string, v int64) {
		require.NoError(t, db.InTenant(ctx, d.Owner, tenant, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO limits (name, value, updated_by) VALUES ('model_spend_day', $1, 'test')`, v)
			return err
		}))
	}
	row(lower, 3000000)
	row(higher, 4000000)
	row(zero, 0)
	_, err = d.Owner.Exec(ctx, `UPDATE fleet_switches SET assistant_limits = '{"day_cost_usd": 0.0000001, "day_steps": 50}'`)
	require.NoError(t, err)

	require.NoError(t, db.Migrate(ctx, d.Owner, migrations.FS, embedded.AppRole, "test", log))

	spend := func(tenant string) (int64, bool) {
		l, err := limit.Load(ctx, d.App, tenant)
		require.NoError(t, err)
		v, ok := l.Tenant[limit.ModelSpendPerDay]
		return v, ok
	}
	for _, c := range []struct {
		tenant string
		want   int64
	}{{only, 2500000}, {lower, 1000000}, {higher, 4000000}, {zero, 1}} {
		v, ok := spend(c.tenant)
		require.True(t, ok, c.tenant)
		require.Equal(t, c.want, v, c.tenant)
	}
	_, ok := spend(none)
	require.False(t, ok, "no spend per day, no row")
	l, err := limit.Load(ctx, d.App, none)
	require.NoError(t, err)
	require.Equal(t, int64(1), l.Global[limit.ModelSpendPerDay], "under a micro-dollar is the smallest amount, not none")

	json := func(sql string, args ...any) string {
		var s string
		require.NoError(t, d.Owner.QueryRow(ctx, sql, args...).Scan(&s))
		return s
	}
	require.JSONEq(t, `{"task_steps": 5}`, json(`SELECT assistant_limits::text FROM tenants WHERE id = $1`, only))
	require.JSONEq(t, `{"day_tokens": 1000}`, json(`SELECT assistant_limits::text FROM tenants WHERE id = $1`, higher))
	require.JSONEq(t, `{"task_tabs": 3}`, json(`SELECT assistant_limits::text FROM tenants WHERE id = $1`, none))
	require.JSONEq(t, `{"day_steps": 50}`, json(`SELECT assistant_limits::text FROM fleet_switches`))
}
