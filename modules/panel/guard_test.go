package panel_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/app/testenv"
	"github.com/fleetwright/fleetwright/modules/panel"
	"github.com/fleetwright/fleetwright/modules/panel/paneltest"
)

func startIn(t *testing.T, d *testenv.Database, appURL string) error {
	dir, err := os.MkdirTemp(testenv.Dir(t), "guard-")
	require.NoError(t, err)
	p, err := panel.Start(context.Background(), panel.Config{Listen: "127.0.0.1:0", DataDir: dir,
		DatabaseURL: d.OwnerURL, DatabaseAppURL: appURL, RedisURL: testenv.RedisURL(t), DBMaxConns: 8, PGMaxConnections: 300,
		ShutdownTimeout: 5 * time.Second, SessionIdle: 30 * time.Minute, SessionMax: time.Hour, AuditSealInterval: time.Minute}, testenv.Logger(t))
	if err == nil {
		p.Stop()
	}
	return err
}

func TestPanelRefusesToRunAsSuperuserOrOwner(t *testing.T) {
	d := testenv.DB(t)
	require.ErrorContains(t, startIn(t, d, d.SuperURL), "superuser")
	require.ErrorContains(t, startIn(t, d, d.OwnerURL), "owns")
	require.NoError(t, startIn(t, d, d.AppURL))
}

// A panel does not start on a schema written by a newer release: it names
// the version it does not ship and what to do.
func TestPanelRefusesASchemaOfANewerRelease(t *testing.T) {
	d := testenv.DB(t)
	_, err := d.Owner.Exec(context.Background(), "INSERT INTO schema_migrations (version, release) VALUES ('9999_from_a_newer_release', 'v9.0.0')")
	require.NoError(t, err)
	err = startIn(t, d, d.AppURL)
	require.ErrorContains(t, err, "migration 9999_from_a_newer_release (applied by release v9.0.0")
	require.ErrorContains(t, err, "restore the backup")
}

// TestEveryTenantTableHasForcedRowSecurity reads the catalogue, so a table
// that a later migration adds with a tenant_id column is covered at once.
func TestEveryTenantTableHasForcedRowSecurity(t *testing.T) {
	ctx := context.Background()
	d := testenv.DB(t)
	require.NoError(t, db.CheckRowSecurity(ctx, d.App))
	var n int
	require.NoError(t, d.App.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE column_name = 'tenant_id' AND table_schema = 'public'`).Scan(&n))
	require.GreaterOrEqual(t, n, 3, "audit_log, tenant_grants, tenant_members at least")

	for _, c := range []struct{ ddl, want string }{
		{"CREATE TABLE rogue (tenant_id uuid)", "rogue (row-level security not enabled and forced)"},
		{"CREATE TABLE half (tenant_id uuid); ALTER TABLE half ENABLE ROW LEVEL SECURITY", "half (row-level security not enabled and forced)"},
		{"CREATE VIEW peek AS SELECT tenant_id FROM audit_log", "peek (view without security_invoker)"},
	} {
		tx, err := d.Owner.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, c.ddl)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.ErrorContains(t, db.CheckRowSecurity(ctx, d.App), c.want)
	}
	// And the panel refuses to start on such a schema.
	require.ErrorContains(t, startIn(t, d, d.AppURL), "rogue")
}

// TestTenantsSeeOnlyTheirOwnRows goes through the application role with
// tenant A set, directly, through a JOIN and through a view.
func TestTenantsSeeOnlyTheirOwnRows(t *testing.T) {
	ctx := context.Background()
	c := paneltest.New(t)
	a, b := c.Tenant(t, "alpha"), c.Tenant(t, "bravo")
	ua := c.User(t, "a@fleet.test", "operator", "Quiet-Harbour-Lantern-42")
	ub := c.User(t, "b@fleet.test", "operator", "Quiet-Harbour-Lantern-43")
	c.Grant(t, ua, a)
	c.Grant(t, ub, b)
	q := func(tenant, sql string) []string {
		var out []string
		err := db.InTenant(ctx, c.DB.App, tenant, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, sql)
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		require.NoError(t, err)
		return out
	}
	require.Equal(t, []string{a.ID}, q(a.ID, `SELECT DISTINCT tenant_id::text FROM tenant_grants`))
	require.Equal(t, []string{"a@fleet.test"}, q(a.ID, `SELECT u.email FROM users u JOIN tenant_grants g ON g.user_id = u.id`))
	require.Equal(t, []string{"a@fleet.test"}, q(a.ID, `SELECT email FROM tenant_members`))
	require.Equal(t, []string{a.ID}, q(a.ID, `SELECT DISTINCT tenant_id::text FROM audit_log`))
	require.Empty(t, q(a.ID, `SELECT email FROM tenant_members WHERE tenant_id = '`+b.ID+`'`), "asking for B by id finds nothing")
	// Without a tenant, tenant tables are empty.
	var n int
	require.NoError(t, c.DB.App.QueryRow(ctx, `SELECT (SELECT count(*) FROM tenant_grants) + (SELECT count(*) FROM tenant_members) + (SELECT count(*) FROM audit_log)`).Scan(&n))
	require.Zero(t, n)
	// Writing into another tenant is refused too.
	err := db.InTenant(ctx, c.DB.App, a.ID, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO tenant_grants (tenant_id, user_id) VALUES ($1, $2)`, b.ID, ua.ID)
		return err
	})
	require.ErrorContains(t, err, "row-level security")
}
