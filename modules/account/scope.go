package account

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetwright/fleetwright/app/db"
	"github.com/fleetwright/fleetwright/modules/auth"
)

func inTenant(ctx context.Context, pool *pgxpool.Pool, tenantID string, fn func(pgx.Tx) error) error {
	return db.InTenant(ctx, pool, tenantID, fn)
}

// reach loads the tenants a user reaches: every tenant for an admin (the
// tenants table is not tenant-owned), else their grants, read in a
// transaction scoped to the user (app.user_id), never across tenants.
func reach(ctx context.Context, pool *pgxpool.Pool, userID string, role auth.Role) ([]auth.Tenant, error) {
	var out []auth.Tenant
	collect := func(rows pgx.Rows, err error) error {
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (auth.Tenant, error) {
			var t auth.Tenant
			err := r.Scan(&t.ID, &t.Slug, &t.Name)
			return t, err
		})
		return err
	}
	if role == auth.Admin {
		return out, collect(pool.Query(ctx, `SELECT id::text, slug, name FROM tenants ORDER BY name`))
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('app.user_id', $1, true)", userID); err != nil {
			return err
		}
		return collect(tx.Query(ctx, `SELECT t.id::text, t.slug, t.name FROM tenant_grants g JOIN tenants t ON t.id = g.tenant_id
			WHERE g.user_id = app_user() ORDER BY t.name`))
	})
	return out, err
}
