package crawl_test

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
)

// Migration 0206: a tenant's allowlist entries become entries with ports,
// opening what they opened before (80, 443 and each extra port) and no more.
func TestMigrationGivesAllowlistEntriesTheirPorts(t *testing.T) {
	d := testenv.EmptyDB(t)
	ctx := context.Background()
	log := testenv.Logger(t)
	before := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, n := range names {
		if n < "0206" {
			b, err := fs.ReadFile(migrations.FS, n)
			require.NoError(t, err)
			before[n] = &fstest.MapFile{Data: b}
		}
	}
	require.NoError(t, db.Migrate(ctx, d.Owner, before, embedded.AppRole, "test", log))
	tenant := func(slug string, allow []string, ports []int) string {
		var id string
		require.NoError(t, d.Owner.QueryRow(ctx, `INSERT INTO tenants (slug, name) VALUES ($1, $1) RETURNING id::text`, slug).Scan(&id))
		require.NoError(t, db.InTenant(ctx, d.Owner, id, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO tenant_egress (tenant_id, allow, ports) VALUES (app_tenant(), $1, $2)`, allow, ports)
			return err
		}))
		return id
	}
	demo := tenant("demo", []string{"127.0.0.0/8"}, []int{8091})
	both := tenant("both", []string{"10.1.0.0/16", "::1", "fd00::/8"}, []int{8080, 9000})
	noPorts := tenant("noports", []string{"10.0.0.5"}, []int{})
	noAllow := tenant("noallow", []string{}, []int{8443})
	require.NoError(t, db.Migrate(ctx, d.Owner, migrations.FS, embedded.AppRole, "test", log))
	allow := func(id string) ([]string, []int) {
		var a []string
		var p []int
		require.NoError(t, db.InTenant(ctx, d.App, id, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT allow, ports FROM tenant_egress`).Scan(&a, &p)
		}))
		return a, p
	}
	a, p := allow(demo)
	require.Equal(t, []string{"127.0.0.0/8", "127.0.0.0/8:8091"}, a)
	require.Equal(t, []int{8091}, p)
	a, _ = allow(both)
	require.Equal(t, []string{"10.1.0.0/16", "::1", "fd00::/8", "10.1.0.0/16:8080", "10.1.0.0/16:9000", "[::1]:8080", "[::1]:9000",
		"[fd00::/8]:8080", "[fd00::/8]:9000"}, a)
	a, _ = allow(noPorts)
	require.Equal(t, []string{"10.0.0.5"}, a)
	a, p = allow(noAllow)
	require.Empty(t, a)
	require.Equal(t, []int{8443}, p)
}
